//! Which answers count as successes: the expected status and kind of each [`Scenario`]; any
//! other answer is named by its kind (`200 replayed`, `503 STORE_UNAVAILABLE`, …) for the
//! error counts.

use super::Scenario;

/// Whether `needle` occurs in `haystack`.
fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack
        .windows(needle.len())
        .any(|window| window == needle)
}

/// Classifies an answer: `Ok(())` when it is the scenario's expected one, else the error kind.
pub(super) fn check(scenario: Scenario, status: u16, body: &[u8]) -> Result<(), String> {
    let expected = match scenario {
        Scenario::NewIdentity | Scenario::HttpTool | Scenario::HeldNewIdentity => {
            status == 200 && contains(body, br#""replayed":false"#)
        }
        Scenario::UpstreamDirect => status == 200,
        Scenario::Replay | Scenario::HeldReplay => {
            status == 200 && contains(body, br#""replayed":true"#)
        }
        Scenario::Conflict => status == 409 && contains(body, br#""IDEMPOTENCY_CONFLICT""#),
        Scenario::McpPing => status == 200 && contains(body, br#""result":{}"#),
        Scenario::McpNewIdentity | Scenario::McpReplay => {
            let replayed = scenario == Scenario::McpReplay;
            let marker: &[u8] = if replayed {
                br#""replayed":true"#
            } else {
                br#""replayed":false"#
            };
            status == 200 && contains(body, br#""isError":false"#) && contains(body, marker)
        }
    };
    if expected {
        return Ok(());
    }
    if status == 200 && scenario.is_mcp() && !contains(body, br#""isError":false"#) {
        return Err("200 isError".to_owned());
    }
    if status == 200 {
        return Err(if contains(body, br#""replayed":true"#) {
            "200 replayed".to_owned()
        } else {
            "200 not replayed".to_owned()
        });
    }
    let code = serde_json::from_slice::<serde_json::Value>(body)
        .ok()
        .and_then(|problem| problem["code"].as_str().map(str::to_owned))
        .unwrap_or_default();
    Err(format!("{status} {code}").trim_end().to_owned())
}

#[cfg(test)]
mod tests {
    use super::{check, Scenario};

    #[test]
    fn classifies_answers() {
        assert!(check(Scenario::NewIdentity, 200, br#"{"replayed":false}"#).is_ok());
        assert_eq!(
            check(Scenario::NewIdentity, 200, br#"{"replayed":true}"#),
            Err("200 replayed".to_owned())
        );
        assert!(check(Scenario::Replay, 200, br#"{"replayed":true}"#).is_ok());
        assert!(check(
            Scenario::Conflict,
            409,
            br#"{"code":"IDEMPOTENCY_CONFLICT"}"#
        )
        .is_ok());
        assert_eq!(
            check(Scenario::Conflict, 503, br#"{"code":"STORE_UNAVAILABLE"}"#),
            Err("503 STORE_UNAVAILABLE".to_owned())
        );
        assert_eq!(check(Scenario::Replay, 502, b"oops"), Err("502".to_owned()));
        assert!(check(Scenario::HeldNewIdentity, 200, br#"{"replayed":false}"#).is_ok());
        assert!(check(Scenario::HeldReplay, 200, br#"{"replayed":true}"#).is_ok());
        assert_eq!(
            check(
                Scenario::HeldReplay,
                409,
                br#"{"code":"EXECUTION_UNCERTAIN"}"#
            ),
            Err("409 EXECUTION_UNCERTAIN".to_owned())
        );
        let mcp = |replayed: bool| {
            format!(
                r#"{{"result":{{"isError":false,"_meta":{{"io.carmy/execution":{{"replayed":{replayed}}}}}}}}}"#
            )
        };
        assert!(check(Scenario::McpNewIdentity, 200, mcp(false).as_bytes()).is_ok());
        assert!(check(Scenario::McpReplay, 200, mcp(true).as_bytes()).is_ok());
        assert!(check(
            Scenario::McpPing,
            200,
            br#"{"jsonrpc":"2.0","id":1,"result":{}}"#
        )
        .is_ok());
        assert!(check(Scenario::McpPing, 400, b"").is_err());
        assert_eq!(
            check(Scenario::McpReplay, 200, mcp(false).as_bytes()),
            Err("200 not replayed".to_owned())
        );
        assert_eq!(
            check(Scenario::McpReplay, 200, br#"{"result":{"isError":true}}"#),
            Err("200 isError".to_owned())
        );
    }
}
