//! Verdict reasons as JSON, one shape for every front end (the CLI's `--json`, the Python package).

use lance_actions::Reason;
use serde_json::{Value, json};

/// `{text, rule, action, peer_version, peer_action, path, detail}`: what a script needs to act on a
/// verdict, with `text` the sentence a person reads.
pub fn reason(reason: &Reason) -> Value {
    json!({
        "text": reason.to_string(),
        "rule": format!("{:?}", reason.rule),
        "action": format!("{:?}", reason.ours),
        "peer_version": reason.peer_version,
        "peer_action": reason.peer_action.map(|a| format!("{a:?}")),
        "path": reason.path.as_ref().map(|p| p.to_string()),
        "detail": reason.detail,
    })
}
