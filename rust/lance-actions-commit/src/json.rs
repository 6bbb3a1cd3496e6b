//! Verdict reasons as JSON, one shape for every front end (the CLI's `--json`, the Python package).

use lance_actions::Reason;

use crate::Interference;
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

/// What made a write run again, as data: `{kind, text, key_race, reason}`, `reason` being the
/// judgement's [`reason`] (`null` for lost writes) and `kind` [`Interference::kind`]. A layer
/// whose own reasons wrap the commit loop's (replay's) gives the same shape through
/// [`interference_parts`].
pub fn interference(interference: &Interference) -> Value {
    interference_parts(
        interference.kind(),
        &interference.to_string(),
        interference.reason(),
        interference.is_key_race(),
    )
}

/// [`interference`] from its parts, for a layer whose own reasons wrap the commit loop's.
pub fn interference_parts(kind: &str, text: &str, judged: Option<&Reason>, key_race: bool) -> Value {
    json!({ "kind": kind, "text": text, "key_race": key_race, "reason": judged.map(reason) })
}

#[cfg(test)]
mod tests {
    use lance_actions::{ActionKind, Rule};

    use super::*;

    #[test]
    fn interference_says_its_kind_whether_keys_raced_and_the_judgement() {
        let judged = Reason {
            rule: Rule::KeysIntersect,
            ours: ActionKind::AddFragments,
            peer_version: Some(4),
            peer_action: None,
            path: None,
            detail: "k=1".into(),
        };
        let race = interference(&Interference::WriterLanded { reason: Box::new(judged) });
        assert_eq!(race["kind"], "writer_landed");
        assert_eq!(race["key_race"], true);
        assert_eq!(race["reason"]["rule"], "KeysIntersect");
        assert_eq!(race["reason"]["peer_version"], 4);
        assert!(race["text"].as_str().is_some_and(|t| t.starts_with("key race: ")), "{race}");
        let lost = interference(&Interference::VersionTaken { attempts: 2 });
        assert_eq!(lost["kind"], "version_taken");
        assert_eq!(lost["key_race"], false);
        assert!(lost["reason"].is_null(), "{lost}");
    }
}
