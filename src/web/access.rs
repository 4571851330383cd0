//! Who may call which route: the one table the security guard checks before any handler runs.
//!
//! Every route of the router is listed here with the access it needs. A route missing from the
//! table is refused in every mode (so a new route's first test fails until it is declared), and
//! a unit test below reads the routers' sources and fails when a `.route(…)` has no entry, or
//! an entry names no route.
use axum::http::Method;

use crate::domain::accounts::Role;

/// What a route needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// Anyone, logged in or not (the login page, static assets).
    Public,
    /// A logged-in user with at least this role (single-user mode's local user has every role).
    Role(Role),
}

use Access::Public;
const VIEWER: Access = Access::Role(Role::Viewer);
const EDITOR: Access = Access::Role(Role::Editor);
const ADMIN: Access = Access::Role(Role::Admin);

/// (method, route pattern as registered, access). Viewers read every page and export; editors
/// change eval sets, candidates (their keys need an admin, checked where the key is read),
/// thresholds, runs, probes, checklists and saved scorecards; admins manage users.
pub const ROUTES: &[(&str, &str, Access)] = &[
    ("GET", "/static/{*path}", Public),
    ("GET", "/login", Public),
    ("POST", "/login", Public),
    ("POST", "/logout", Public),
    // sign-in through the team's OIDC provider: leaving for it, and coming back
    ("GET", "/login/oidc", Public),
    ("GET", "/login/oidc/callback", Public),
    ("GET", "/", VIEWER),
    ("POST", "/demo/run", EDITOR),
    ("GET", "/measure", VIEWER),
    // bakeoff's own series (counts only); Prometheus sends a viewer's API token in accounts mode.
    ("GET", "/metrics", VIEWER),
    // my account: every logged-in user
    ("GET", "/account", VIEWER),
    ("POST", "/account/password", VIEWER),
    ("POST", "/account/tokens", VIEWER),
    ("POST", "/account/tokens/{id}/revoke", VIEWER),
    // users
    ("GET", "/users", ADMIN),
    ("POST", "/users", ADMIN),
    ("POST", "/users/{id}/role", ADMIN),
    ("POST", "/users/{id}/password", ADMIN),
    ("POST", "/users/{id}/disable", ADMIN),
    ("POST", "/users/{id}/enable", ADMIN),
    ("POST", "/users/{id}/tokens/revoke", ADMIN),
    ("POST", "/users/{id}/unlock", ADMIN),
    ("POST", "/users/{id}/remove", ADMIN),
    ("POST", "/users/oidc", ADMIN),
    ("POST", "/users/oidc/remove", ADMIN),
    // audit log
    ("GET", "/audit", VIEWER),
    ("GET", "/audit/export.csv", VIEWER),
    ("GET", "/audit/export.json", VIEWER),
    // measurement workers (their heartbeats) and the caps they apply
    ("GET", "/workers", VIEWER),
    // schedules start runs (an editor's), on their own; see docs/schedules.md
    ("GET", "/schedules", VIEWER),
    ("POST", "/schedules", EDITOR),
    ("GET", "/schedules/new", VIEWER),
    ("GET", "/schedules/{id}", VIEWER),
    ("GET", "/schedules/{id}/edit", VIEWER),
    ("POST", "/schedules/{id}/edit", EDITOR),
    ("POST", "/schedules/{id}/pause", EDITOR),
    ("POST", "/schedules/{id}/resume", EDITOR),
    ("POST", "/schedules/{id}/delete", EDITOR),
    // notification targets hold secrets and send to the outside: an admin's
    ("GET", "/notifications", VIEWER),
    ("POST", "/notifications", ADMIN),
    ("POST", "/notifications/{id}/test", ADMIN),
    ("POST", "/notifications/{id}/delete", ADMIN),
    // workloads: traffic logs imported and shared-prefix workloads generated (docs/workloads.md)
    ("GET", "/workloads", VIEWER),
    ("POST", "/workloads/import", EDITOR),
    ("POST", "/workloads/generate", EDITOR),
    ("GET", "/workloads/versions/{version_id}", VIEWER),
    ("GET", "/workloads/versions/{version_id}/download", VIEWER),
    // candidates and operability
    ("GET", "/candidates", VIEWER),
    ("POST", "/candidates", EDITOR),
    ("GET", "/candidates/new", VIEWER),
    ("GET", "/candidates/{id}", VIEWER),
    ("GET", "/candidates/{id}/edit", VIEWER),
    ("POST", "/candidates/{id}/edit", EDITOR),
    ("POST", "/candidates/{id}/worker-labels", EDITOR),
    ("GET", "/candidates/{id}/operability", VIEWER),
    ("POST", "/candidates/{id}/operability/probes", EDITOR),
    ("GET", "/candidates/{id}/operability/probes/live", VIEWER),
    ("POST", "/candidates/{id}/operability/checklist", EDITOR),
    ("POST", "/candidates/{id}/operability/soak", EDITOR),
    // retiring keeps every run's snapshot, so editors may; restoring likewise
    ("POST", "/candidates/{id}/retire", EDITOR),
    ("POST", "/candidates/{id}/restore", EDITOR),
    ("POST", "/evalsets/{version_id}/retire", EDITOR),
    ("POST", "/evalsets/{version_id}/restore", EDITOR),
    ("POST", "/thresholds/{id}/retire", EDITOR),
    ("POST", "/thresholds/{id}/restore", EDITOR),
    ("POST", "/thresholds/{id}/default", EDITOR),
    // deleting is an admin's, and only for what no run or saved scorecard refers to
    ("POST", "/candidates/{id}/delete", ADMIN),
    ("POST", "/evalsets/{version_id}/delete", ADMIN),
    ("POST", "/thresholds/{id}/delete", ADMIN),
    // eval sets
    ("GET", "/evalsets", VIEWER),
    ("GET", "/evalsets/schema.json", VIEWER),
    ("GET", "/evalsets/import", VIEWER),
    ("POST", "/evalsets/import", EDITOR),
    ("POST", "/evalsets/import/save", EDITOR),
    ("POST", "/evalsets/{version_id}/profile", EDITOR),
    ("GET", "/evalsets/{version_id}", VIEWER),
    ("GET", "/evalsets/{version_id}/download", VIEWER),
    ("GET", "/evalsets/{version_id}/diff/{other_id}", VIEWER),
    ("GET", "/evalsets/{version_id}/cases/new", VIEWER),
    ("POST", "/evalsets/{version_id}/cases/new", EDITOR),
    ("GET", "/evalsets/{version_id}/cases/{position}/edit", VIEWER),
    ("POST", "/evalsets/{version_id}/cases/{position}/edit", EDITOR),
    // deleting a case saves a new version; earlier versions stay
    ("POST", "/evalsets/{version_id}/cases/{position}/delete", EDITOR),
    // thresholds
    ("GET", "/thresholds", VIEWER),
    ("POST", "/thresholds", EDITOR),
    ("GET", "/thresholds/new", VIEWER),
    ("GET", "/thresholds/{id}", VIEWER),
    ("GET", "/thresholds/{id}/edit", VIEWER),
    ("POST", "/thresholds/{id}/edit", EDITOR),
    // runs
    ("GET", "/runs", VIEWER),
    ("POST", "/runs", EDITOR),
    ("GET", "/runs/new", VIEWER),
    ("GET", "/runs/estimate", VIEWER),
    ("GET", "/runs/{id}", VIEWER),
    ("GET", "/runs/{id}/live", VIEWER),
    ("GET", "/runs/{id}/events", VIEWER),
    ("GET", "/runs/{id}/cases", VIEWER),
    ("GET", "/runs/{id}/timeline", VIEWER),
    ("GET", "/runs/{id}/telemetry", VIEWER),
    ("POST", "/runs/{id}/cancel", EDITOR),
    ("POST", "/runs/{id}/again", EDITOR),
    ("POST", "/runs/{id}/resume", EDITOR),
    ("GET", "/runs/{id}/export.json", VIEWER),
    // archive
    ("GET", "/archive", VIEWER),
    ("POST", "/archive/import", EDITOR),
    ("GET", "/archive/compare", VIEWER),
    ("GET", "/archive/history", VIEWER),
    // scorecards
    ("GET", "/runs/{id}/scorecard", VIEWER),
    ("GET", "/runs/{id}/scorecard/print", VIEWER),
    ("GET", "/runs/{id}/scorecard/export.json", VIEWER),
    ("GET", "/runs/{id}/scorecard/export.csv", VIEWER),
    ("GET", "/runs/{id}/scorecard/export.md", VIEWER),
    ("POST", "/runs/{id}/scorecard/save", EDITOR),
    ("GET", "/scorecards", VIEWER),
    ("GET", "/scorecards/{id}", VIEWER),
    // the JSON API (web/api/): reads need a viewer, changes an editor, as the pages they mirror
    ("GET", "/api/v1/openapi.json", Public),
    ("GET", "/api/v1/candidates", VIEWER),
    ("POST", "/api/v1/candidates", EDITOR),
    ("GET", "/api/v1/candidates/{id}", VIEWER),
    ("PUT", "/api/v1/candidates/{id}/worker-labels", EDITOR),
    ("GET", "/api/v1/workers", VIEWER),
    ("GET", "/api/v1/workloads", VIEWER),
    ("POST", "/api/v1/workloads", EDITOR),
    ("GET", "/api/v1/workload-versions/{id}", VIEWER),
    ("GET", "/api/v1/evalsets", VIEWER),
    ("POST", "/api/v1/evalsets", EDITOR),
    ("GET", "/api/v1/evalsets/{id}", VIEWER),
    ("GET", "/api/v1/evalset-versions/{id}/cases", VIEWER),
    ("GET", "/api/v1/profiles", VIEWER),
    ("POST", "/api/v1/profiles", EDITOR),
    ("GET", "/api/v1/profiles/{id}", VIEWER),
    ("GET", "/api/v1/runs", VIEWER),
    ("POST", "/api/v1/runs", EDITOR),
    ("GET", "/api/v1/runs/{id}", VIEWER),
    ("POST", "/api/v1/runs/{id}/cancel", EDITOR),
    ("GET", "/api/v1/runs/{id}/records", VIEWER),
    ("GET", "/api/v1/runs/{id}/scorecard", VIEWER),
    ("GET", "/api/v1/runs/{id}/verdict", VIEWER),
    ("GET", "/api/v1/archive", VIEWER),
    ("GET", "/api/v1/archive/compare", VIEWER),
    ("GET", "/api/v1/archive/history", VIEWER),
    ("POST", "/api/v1/runs/{id}/scorecards", EDITOR),
    ("GET", "/api/v1/scorecards", VIEWER),
    ("GET", "/api/v1/scorecards/{id}", VIEWER),
    // review queue, labels, blind comparisons, judge calibration (issue 50): viewers read,
    // editors label and act on the queue
    ("GET", "/review", VIEWER),
    ("GET", "/runs/{id}/review", VIEWER),
    ("POST", "/runs/{id}/review/fill", EDITOR),
    ("POST", "/runs/{id}/review/add", EDITOR),
    ("POST", "/runs/{id}/review/ground-truth", EDITOR),
    ("GET", "/runs/{id}/review/compare", VIEWER),
    ("POST", "/runs/{id}/review/compare", EDITOR),
    ("POST", "/runs/{id}/review/judge-pairs", EDITOR),
    ("GET", "/review/items/{id}", VIEWER),
    ("POST", "/review/items/{id}/label", EDITOR),
    ("POST", "/review/items/{id}/claim", EDITOR),
    ("POST", "/review/items/{id}/skip", EDITOR),
    ("POST", "/review/items/{id}/assign", EDITOR),
    ("GET", "/judges/{name}/calibration", VIEWER),
    ("GET", "/api/v1/runs/{id}/review", VIEWER),
    ("POST", "/api/v1/runs/{id}/review/fill", EDITOR),
    ("GET", "/api/v1/review/items", VIEWER),
    ("GET", "/api/v1/review/items/{id}", VIEWER),
    ("POST", "/api/v1/review/items/{id}/label", EDITOR),
    ("POST", "/api/v1/review/items/{id}/claim", EDITOR),
    ("POST", "/api/v1/review/items/{id}/skip", EDITOR),
    ("POST", "/api/v1/review/items/{id}/assign", EDITOR),
    ("POST", "/api/v1/runs/{id}/review/preferences", EDITOR),
    ("GET", "/api/v1/runs/{id}/review/win-rates", VIEWER),
    ("GET", "/api/v1/judges/{name}/calibration", VIEWER),
    ("GET", "/api/v1/schedules", VIEWER),
    ("POST", "/api/v1/schedules", EDITOR),
    ("GET", "/api/v1/schedules/{id}", VIEWER),
    ("GET", "/api/v1/notification-targets", VIEWER),
    ("POST", "/api/v1/notification-targets", ADMIN),
];

/// The access declared for `method` on the route `pattern`; None when it has none (refused).
/// HEAD is answered like GET.
pub fn required(method: &Method, pattern: &str) -> Option<Access> {
    let method = if method == Method::HEAD { "GET" } else { method.as_str() };
    ROUTES
        .iter()
        .find(|(m, p, _)| *m == method && *p == pattern)
        .map(|(_, _, access)| *access)
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;

    /// Every (method, pattern) registered with `.route("…", get(…).post(…))` in `src/web`.
    fn routes_in_sources() -> BTreeSet<(String, String)> {
        let mut found = BTreeSet::new();
        let mut stack = vec![std::path::PathBuf::from(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/src/web"
        ))];
        while let Some(dir) = stack.pop() {
            for entry in std::fs::read_dir(&dir).unwrap() {
                let path = entry.unwrap().path();
                if path.is_dir() {
                    stack.push(path);
                } else if path.extension().is_some_and(|e| e == "rs") && !path.ends_with("web/access.rs") {
                    let text = std::fs::read_to_string(&path).unwrap();
                    for call in text.split(".route(").skip(1) {
                        let call = call.trim_start();
                        let Some(rest) = call.strip_prefix('"') else { continue };
                        let (pattern, rest) = rest.split_once('"').unwrap();
                        // The methods are named before the call's closing parenthesis at depth 0.
                        let mut depth = 1;
                        let end = rest
                            .char_indices()
                            .find(|&(_, c)| {
                                depth += match c {
                                    '(' => 1,
                                    ')' => -1,
                                    _ => 0,
                                };
                                depth == 0
                            })
                            .map_or(rest.len(), |(i, _)| i);
                        let args = &rest[..end];
                        for (method, name) in [
                            ("GET", "get("),
                            ("POST", "post("),
                            ("PUT", "put("),
                            ("DELETE", "delete("),
                        ] {
                            let mut from = 0;
                            while let Some(i) = args[from..].find(name) {
                                let at = from + i;
                                let before = args[..at].chars().last();
                                if !before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':') {
                                    found.insert((method.to_string(), pattern.to_string()));
                                }
                                from = at + name.len();
                            }
                        }
                    }
                }
            }
        }
        found
    }

    #[test]
    fn every_route_of_the_router_declares_its_access_and_every_entry_is_a_route() {
        let in_sources = routes_in_sources();
        assert!(in_sources.len() > 50, "the scan found too few routes: {in_sources:?}");
        let declared: BTreeSet<(String, String)> =
            ROUTES.iter().map(|(m, p, _)| (m.to_string(), p.to_string())).collect();
        let undeclared: Vec<_> = in_sources.difference(&declared).collect();
        assert!(
            undeclared.is_empty(),
            "routes without a declared access in web/access.rs ROUTES: {undeclared:?}"
        );
        let stale: Vec<_> = declared.difference(&in_sources).collect();
        assert!(stale.is_empty(), "ROUTES entries that name no route: {stale:?}");
        assert_eq!(declared.len(), ROUTES.len(), "a route is declared twice");
    }

    #[test]
    fn head_is_get_and_unknown_routes_have_no_access() {
        assert_eq!(required(&Method::HEAD, "/"), Some(VIEWER));
        assert_eq!(required(&Method::POST, "/users"), Some(ADMIN));
        assert_eq!(required(&Method::DELETE, "/runs/{id}"), None);
    }
}
