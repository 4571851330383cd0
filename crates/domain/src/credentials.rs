//! The one credentials rule, and the only way to get a candidate the store will write.
//!
//! A candidate's stored API key and its key variable decide what secret is sent, and the base
//! URL decides where: setting, changing or clearing either needs the admin role, whoever asks
//! and by whichever path (the form, the API, a candidates file, a run import, the demo). The
//! store takes a [`NewCandidate`] to create and a [`CandidateChange`] to update, and nothing
//! else: both are built only by [`check_new`] and [`check_change`] here, so a path that forgets
//! the check does not compile.
use super::accounts::Role;
use super::candidate::{Candidate, CandidateSpec, Secret};

/// A change of credentials that needs an admin (what it is, for the refusal), or None.
pub fn touched(before: Option<&CandidateSpec>, next: &CandidateSpec, key_typed: bool) -> Option<&'static str> {
    let key_before: Option<&Secret> = before.and_then(|b| b.api_key.as_ref());
    let env_before = before.and_then(|b| b.api_key_env.as_deref());
    if key_typed || (next.api_key.is_some() && next.api_key.as_ref() != key_before) {
        Some("setting a candidate's API key")
    } else if key_before.is_some() && next.api_key.is_none() {
        Some("clearing a candidate's API key")
    } else if next.api_key_env.as_deref() != env_before {
        Some("setting or changing a candidate's API key variable")
    } else if (next.api_key.is_some() || next.api_key_env.is_some())
        && next.tls_ca_file != before.and_then(|b| b.tls_ca_file.clone())
    {
        // A trusted CA decides which server the key goes to, as the base URL does.
        Some("setting or changing the TLS CA file of a candidate with an API key")
    } else if next.wire.secret_headers() != before.map(|b| b.wire.secret_headers()).unwrap_or_default() {
        Some("setting, changing or clearing a candidate's secret headers")
    } else {
        None
    }
}

/// Why [`check_new`] or [`check_change`] refused: what needed the admin role.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NeedsAdmin(pub &'static str);

/// A candidate to create, its credentials checked against the role of whoever creates it.
#[derive(Debug, Clone)]
pub struct NewCandidate {
    spec: CandidateSpec,
}

impl NewCandidate {
    pub fn spec(&self) -> &CandidateSpec {
        &self.spec
    }

    /// The same candidate under another name (a name is no credential).
    pub fn renamed(mut self, name: impl Into<String>) -> NewCandidate {
        self.spec.name = name.into();
        self
    }
}

/// A stored candidate's update, its credentials checked against the candidate as stored and the
/// role of whoever changes it.
#[derive(Debug, Clone)]
pub struct CandidateChange {
    id: i64,
    before: CandidateSpec,
    spec: CandidateSpec,
}

impl CandidateChange {
    /// The candidate changed.
    pub fn id(&self) -> i64 {
        self.id
    }

    /// The candidate as it will be stored.
    pub fn spec(&self) -> &CandidateSpec {
        &self.spec
    }

    /// The candidate as it was when checked.
    pub fn before(&self) -> &CandidateSpec {
        &self.before
    }

    /// Whether the change stores anything new.
    pub fn changes_anything(&self) -> bool {
        self.spec != self.before
    }

    /// A key follows its server (see `CandidateSpec::drop_credentials_if_moved`): removing
    /// credentials on a move needs nobody's role. Returns whether anything was dropped.
    pub fn drop_credentials_if_moved(&mut self, key_typed: bool) -> bool {
        self.spec.drop_credentials_if_moved(&self.before, key_typed)
    }
}

fn allowed(role: Role, what: Option<&'static str>) -> Result<(), NeedsAdmin> {
    match what {
        Some(what) if role < Role::Admin => Err(NeedsAdmin(what)),
        _ => Ok(()),
    }
}

/// Checks a new candidate: a key (typed, or carried in `spec`) or a key variable needs an admin.
pub fn check_new(role: Role, spec: CandidateSpec, key_typed: bool) -> Result<NewCandidate, NeedsAdmin> {
    allowed(role, touched(None, &spec, key_typed))?;
    Ok(NewCandidate { spec })
}

/// A stored candidate's prompt-mode variant (a run whose tool mode is `both`): the same
/// candidate under [`crate::tool_calls::prompt_mode_name`]. It carries no credential but the
/// ones `candidate` was stored with (checked then), so it needs nobody's role.
pub fn prompt_mode_variant(candidate: &Candidate) -> NewCandidate {
    let mut spec = candidate.spec.clone();
    spec.name = crate::tool_calls::prompt_mode_name(&candidate.spec.name);
    NewCandidate { spec }
}

/// Checks an update of `before` to `next`: setting, changing or clearing the key, or naming,
/// changing or removing the key variable, needs an admin.
pub fn check_change(
    role: Role,
    before: &Candidate,
    next: CandidateSpec,
    key_typed: bool,
) -> Result<CandidateChange, NeedsAdmin> {
    allowed(role, touched(Some(&before.spec), &next, key_typed))?;
    Ok(CandidateChange {
        id: before.id,
        before: before.spec.clone(),
        spec: next,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Timestamp;

    fn spec(url: &str, key: Option<&str>, env: Option<&str>) -> CandidateSpec {
        let mut s = CandidateSpec::openai_chat("a", url, "m");
        s.api_key = key.map(Secret::new);
        s.api_key_env = env.map(str::to_string);
        s
    }

    fn stored(spec: CandidateSpec) -> Candidate {
        Candidate {
            id: 7,
            spec,
            created_at: Timestamp(0),
            updated_at: Timestamp(0),
        }
    }

    #[test]
    fn only_a_change_of_key_or_key_variable_needs_an_admin() {
        let before = spec("http://h/v1", Some("sk-1"), Some("BAKEOFF_KEY_A"));
        // Kept as they are (also when the URL moves: the move drops them, which needs nobody).
        let same = spec("http://other/v1", Some("sk-1"), Some("BAKEOFF_KEY_A"));
        assert_eq!(touched(Some(&before), &same, false), None);
        assert!(touched(Some(&before), &same, true).is_some(), "typed");
        let other_key = spec("http://h/v1", Some("sk-2"), Some("BAKEOFF_KEY_A"));
        assert!(
            touched(Some(&before), &other_key, false).is_some(),
            "another key, even untyped"
        );
        let cleared = spec("http://h/v1", None, Some("BAKEOFF_KEY_A"));
        assert!(touched(Some(&before), &cleared, false).is_some(), "cleared");
        let env = spec("http://h/v1", Some("sk-1"), Some("BAKEOFF_KEY_B"));
        assert!(touched(Some(&before), &env, false).is_some(), "changed variable");
        let no_env = spec("http://h/v1", Some("sk-1"), None);
        assert!(touched(Some(&before), &no_env, false).is_some(), "removed variable");
        // A new candidate: only with credentials, whether typed or carried in the spec.
        assert_eq!(touched(None, &spec("http://h/v1", None, None), false), None);
        assert!(touched(None, &spec("http://h/v1", None, Some("BAKEOFF_KEY_A")), false).is_some());
        assert!(touched(None, &spec("http://h/v1", Some("sk"), None), false).is_some());
    }

    #[test]
    fn the_checked_types_carry_the_role_rule() {
        let keyed = spec("http://h/v1", None, Some("BAKEOFF_KEY_A"));
        assert_eq!(
            check_new(Role::Editor, keyed.clone(), false).unwrap_err(),
            NeedsAdmin("setting or changing a candidate's API key variable")
        );
        assert!(check_new(Role::Admin, keyed.clone(), false).is_ok());
        assert!(check_new(Role::Editor, spec("http://h/v1", None, None), false).is_ok());
        let before = stored(keyed.clone());
        let mut moved = keyed.clone();
        moved.base_url = "http://elsewhere/v1".into();
        let mut change = check_change(Role::Editor, &before, moved, false).unwrap();
        assert_eq!(change.id(), 7);
        assert!(change.drop_credentials_if_moved(false));
        assert_eq!(change.spec().api_key_env, None);
        assert!(check_change(Role::Editor, &before, spec("http://h/v1", None, None), false).is_err());
    }
}
