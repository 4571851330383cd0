//! `bakeoff user …`: accounts from the terminal (the way to create the first admin), and API
//! tokens for scripts and CI. Passwords are never command-line values (other users of the
//! machine can read command lines): they come from a prompt without echo on a terminal, else
//! from `BAKEOFF_USER_PASSWORD`, else from the first line of standard input.
use std::io::{BufRead, IsTerminal};

use anyhow::Context;
use clap::{Args, Subcommand};

use crate::app::accounts;
use crate::domain::accounts::Role;
use crate::store::DynStore;

/// Where a password is read from when standard input is not a terminal.
pub const PASSWORD_ENV: &str = "BAKEOFF_USER_PASSWORD";

#[derive(Debug, Clone, Args)]
pub struct UserArgs {
    #[command(subcommand)]
    pub action: UserAction,
    /// `sqlite://FILE` or `postgres://USER@HOST:PORT/DB` (the one `serve` uses); accepted before
    /// or after the subcommand.
    #[arg(
        long,
        env = "BAKEOFF_DATABASE_URL",
        default_value = "sqlite://bakeoff.db",
        global = true
    )]
    pub database_url: String,
}

fn parse_role(s: &str) -> Result<Role, String> {
    Role::parse(s).ok_or_else(|| format!("{s:?} is not a role: use viewer, editor or admin"))
}

#[derive(Debug, Clone, Subcommand)]
pub enum UserAction {
    /// Create a user (the first one must be an admin). Password: prompted, or BAKEOFF_USER_PASSWORD, or stdin.
    Add {
        /// The login name: letters, digits and . _ @ - (stored lower-case).
        name: String,
        /// viewer (reads, exports), editor (also changes eval sets, candidates, thresholds, runs), admin (also users, keys).
        #[arg(long, value_parser = parse_role)]
        role: Role,
    },
    /// List users with their role and state.
    List,
    /// Change a user's role.
    SetRole {
        /// The user.
        name: String,
        /// viewer, editor or admin.
        #[arg(value_parser = parse_role)]
        role: Role,
    },
    /// Set a new password for a user (ends the user's sessions, revokes their API tokens and
    /// forgets their failed logins).
    Passwd {
        /// The user.
        name: String,
    },
    /// Forget the failed logins counted for a user's name, so no address is slowed logging in as it.
    Unlock {
        /// The user.
        name: String,
    },
    /// Disable an account: its sessions end, it cannot log in, its tokens are refused.
    Disable {
        /// The user.
        name: String,
    },
    /// Re-enable a disabled account.
    Enable {
        /// The user.
        name: String,
    },
    /// Remove a user with its sessions and tokens (the audit log keeps the name).
    Remove {
        /// The user.
        name: String,
    },
    /// API tokens: `Authorization: Bearer <token>` for scripts and CI.
    Token {
        #[command(subcommand)]
        action: TokenAction,
    },
}

#[derive(Debug, Clone, Subcommand)]
pub enum TokenAction {
    /// Create a token and print it once (only its hash is stored).
    Create {
        /// What the token is for, e.g. "ci".
        name: String,
        /// The user the token acts as.
        #[arg(long)]
        user: String,
        /// Scope: the user's role when omitted; never above it.
        #[arg(long, value_parser = parse_role)]
        role: Option<Role>,
    },
    /// List tokens (never their secrets).
    List {
        /// Only this user's tokens.
        #[arg(long)]
        user: Option<String>,
    },
    /// Revoke a token by its id (from `token list`).
    Revoke {
        /// The token's id.
        id: i64,
    },
}

/// A password from the prompt (twice, without echo), the environment, or standard input.
fn read_password(prompt: &str) -> anyhow::Result<String> {
    if let Ok(p) = std::env::var(PASSWORD_ENV) {
        return Ok(p);
    }
    if std::io::stdin().is_terminal() {
        let first = rpassword::prompt_password(format!("{prompt}: ")).context("reading the password")?;
        let again = rpassword::prompt_password("Again, to confirm: ").context("reading the password")?;
        anyhow::ensure!(first == again, "the two passwords differ; nothing was changed");
        return Ok(first);
    }
    let mut line = String::new();
    std::io::stdin()
        .lock()
        .read_line(&mut line)
        .context("reading the password from standard input")?;
    let password = line.trim_end_matches(['\r', '\n']).to_string();
    anyhow::ensure!(
        !password.is_empty(),
        "no password: type it at the prompt, pipe it on standard input, or set {PASSWORD_ENV}"
    );
    Ok(password)
}

pub async fn run(args: UserArgs) -> anyhow::Result<()> {
    let store: DynStore = crate::store::connect(&args.database_url).await?;
    let store = store.as_ref();
    let actor = crate::app::accounts::terminal_actor();
    match args.action {
        UserAction::Add { name, role } => {
            let password = read_password(&format!("Password for {name}"))?;
            let user = accounts::add_user(store, &actor, &name, role, &password).await?;
            println!("created {} ({})", user.username, user.role);
        }
        UserAction::List => {
            let rows: Vec<Vec<String>> = store
                .list_users()
                .await?
                .into_iter()
                .map(|u| {
                    vec![
                        u.username,
                        u.role.to_string(),
                        u.created_at.display(),
                        match u.disabled_at {
                            Some(at) => format!("disabled {}", at.display()),
                            None => "active".into(),
                        },
                    ]
                })
                .collect();
            super::output::table(&mut std::io::stdout(), &["user", "role", "created", "state"], &rows)?;
        }
        UserAction::SetRole { name, role } => {
            let user = accounts::user_named(store, &name).await?;
            let user = accounts::set_role(store, &actor, &user, role).await?;
            println!("{} is now {}", user.username, user.role);
        }
        UserAction::Passwd { name } => {
            let user = accounts::user_named(store, &name).await?;
            let password = read_password(&format!("New password for {}", user.username))?;
            accounts::reset_password(store, &actor, &user, &password).await?;
            println!(
                "password of {} changed; their sessions ended, their API tokens were revoked and their failed logins forgotten",
                user.username
            );
        }
        UserAction::Unlock { name } => {
            let user = accounts::user_named(store, &name).await?;
            let cleared = accounts::unlock(store, &actor, &user).await?;
            println!("{} unlocked ({cleared} failed-login count(s) forgotten)", user.username);
        }
        UserAction::Disable { name } => {
            let user = accounts::user_named(store, &name).await?;
            accounts::set_disabled(store, &actor, &user, true).await?;
            println!("{} is disabled", user.username);
        }
        UserAction::Enable { name } => {
            let user = accounts::user_named(store, &name).await?;
            accounts::set_disabled(store, &actor, &user, false).await?;
            println!("{} is enabled", user.username);
        }
        UserAction::Remove { name } => {
            let user = accounts::user_named(store, &name).await?;
            accounts::remove_user(store, &actor, None, &user).await?;
            println!("{} removed", user.username);
        }
        UserAction::Token { action } => token(store, &actor, action).await?,
    }
    Ok(())
}

async fn token(store: &dyn crate::store::Store, actor: &str, action: TokenAction) -> anyhow::Result<()> {
    match action {
        TokenAction::Create { name, user, role } => {
            let user = accounts::user_named(store, &user).await?;
            let (token, secret) = accounts::create_token(store, actor, &user, &name, role).await?;
            eprintln!(
                "token #{} {:?} for {} ({}); shown this once, store it now:",
                token.id, token.name, token.username, token.role
            );
            println!("{secret}");
        }
        TokenAction::List { user } => {
            let owner = match user {
                Some(name) => Some(accounts::user_named(store, &name).await?.id),
                None => None,
            };
            let rows: Vec<Vec<String>> = store
                .list_api_tokens(owner)
                .await?
                .into_iter()
                .map(|t| {
                    vec![
                        t.id.to_string(),
                        t.name,
                        t.username,
                        t.role.to_string(),
                        t.created_at.display(),
                        t.last_used_at.map(|t| t.display()).unwrap_or_else(|| "never".into()),
                        t.revoked_at
                            .map(|t| format!("revoked {}", t.display()))
                            .unwrap_or_else(|| "active".into()),
                    ]
                })
                .collect();
            super::output::table(
                &mut std::io::stdout(),
                &["id", "name", "user", "role", "created", "last used", "state"],
                &rows,
            )?;
        }
        TokenAction::Revoke { id } => {
            accounts::revoke_token(store, actor, id, None, None).await?;
            println!("token #{id} revoked");
        }
    }
    Ok(())
}
