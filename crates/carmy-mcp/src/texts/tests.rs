//! Checks of every text in the table ([`super::TABLE`]): one entry per situation, a next step
//! in each, no advice to change the request id, every placeholder filled.

use super::*;

const ALL: [Situation; 21] = [
    Situation::Conflict,
    Situation::Running,
    Situation::Interrupted,
    Situation::Reconciling,
    Situation::RecordingPending,
    Situation::Capacity,
    Situation::StoreUnavailable,
    Situation::NotExecuted,
    Situation::HandedBack,
    Situation::RequestIdRequired,
    Situation::StillRunning,
    Situation::KeyInvalid,
    Situation::KeyMissing,
    Situation::KeyReused,
    Situation::Failed,
    Situation::EffectUnknown,
    Situation::RecordDamaged,
    Situation::Superseded,
    Situation::InvalidRequest,
    Situation::ArgumentsTooLarge,
    Situation::UnknownTool,
];

/// Phrases that would send the model to run the call again under another identity.
const NEW_ID: [&str; 9] = [
    "new id",
    "new random",
    "new request id",
    "new request_id",
    "new key",
    "different id",
    "another id",
    "fresh id",
    "new idempotency",
];

/// Verbs a next step starts its advice with.
const STEPS: [&str; 7] = ["retry", "wait", "check", "ask", "tell", "repeat", "call"];

#[test]
fn every_situation_has_exactly_one_entry() {
    assert_eq!(TABLE.len(), ALL.len());
    for situation in ALL {
        assert_eq!(
            TABLE.iter().filter(|e| e.situation == situation).count(),
            1,
            "{situation:?}"
        );
    }
}

#[test]
fn every_text_names_a_next_step_and_never_a_new_id() {
    let tools = ["find_orders".to_owned()];
    let facts = Facts {
        execution_id: Some("exec_1"),
        read_tools: &tools,
        code: "UPSTREAM_UNAVAILABLE",
        message: "connection refused",
        retry_after_seconds: Some(2),
        differs: Some(&["arguments"]),
        key_argument: Some(KeyText::held("request_id")),
        decided_by: None,
        reused: Some(("42 min", "10 min")),
    };
    for entry in TABLE {
        let next = entry.next.to_lowercase();
        assert!(
            STEPS.iter().any(|step| next.contains(step)),
            "{:?} names no next step: {next}",
            entry.situation
        );
        let text = entry.render(&facts).to_lowercase();
        // A failure the tool reported (no effect): only a corrected call gets a new id.
        let corrected = entry.situation == Situation::Failed
            && text.contains("the corrected call is a different action");
        // A model's id past its replay window: check first; only a new action gets a new id.
        let reused = entry.situation == Situation::KeyReused
            && text.find("check with a read-only tool") < text.find("only if this is a new action");
        // A refused id: nothing ran and no record holds it, so the same call needs another.
        let refused = matches!(
            entry.situation,
            Situation::KeyInvalid | Situation::KeyMissing
        );
        for phrase in NEW_ID {
            assert!(
                corrected || reused || refused || !text.contains(phrase),
                "{:?} says {phrase:?}",
                entry.situation
            );
        }
        assert!(
            !text.contains('{'),
            "{:?} left a placeholder: {text}",
            entry.situation
        );
        if entry.effect == Effect::MayHaveHappened {
            assert!(text.contains("may") || text.contains("probably"), "{text}");
            assert!(!text.contains("did not happen"), "{text}");
        }
        if entry.effect == Effect::DidNotHappen {
            assert!(text.contains("did not"), "{text}");
        }
    }
}

#[test]
fn placeholders_are_filled() {
    let tools = ["find_orders".to_owned(), "get_order".to_owned()];
    let text = entry(Situation::Interrupted).render(&Facts {
        execution_id: Some("exec_9"),
        read_tools: &tools,
        ..Facts::default()
    });
    assert!(text.contains("execution exec_9"), "{text}");
    assert!(
        text.contains("(for example `find_orders`, `get_order`)"),
        "{text}"
    );
    let text = entry(Situation::NotExecuted).render(&Facts {
        code: "UPSTREAM_UNAVAILABLE",
        message: "refused",
        retry_after_seconds: Some(3),
        ..Facts::default()
    });
    assert_eq!(
        text,
        "The tool could not act (UPSTREAM_UNAVAILABLE: refused). Its effect did not happen and nothing was recorded. Retry the same call unchanged after 3 s; if it keeps failing, tell the user."
    );
}

#[test]
fn a_failure_a_decision_recorded_is_never_called_the_tools_report() {
    let render = |decided_by| {
        entry(Situation::Failed).render(&Facts {
            execution_id: Some("exec_1"),
            code: "CARD_DECLINED",
            message: "declined",
            decided_by,
            ..Facts::default()
        })
    };
    assert!(render(None).contains("The tool reported the failure itself"));
    let decided = render(Some("operator:ops"));
    assert!(
        decided.contains(
            "This failure was recorded by a decision of operator:ops, not reported by the tool."
        ) && !decided.contains("reported the failure itself"),
        "{decided}"
    );
    // Only a failure the tool reported itself sends a corrected call to a new id.
    let with_key = |decided_by| {
        entry(Situation::Failed).render(&Facts {
            key_argument: Some(KeyText::held("request_id")),
            decided_by,
            ..Facts::default()
        })
    };
    assert!(with_key(None).ends_with(
        "The corrected call is a different action: give it a new random `request_id`, or it is refused as a conflict with this one."
    ));
    assert!(!with_key(Some("operator:ops")).contains("new random"));
}

#[test]
fn a_retry_names_the_id_the_model_must_send_when_its_client_chose_it() {
    let render = |hold| {
        entry(Situation::Running).render(&Facts {
            execution_id: Some("exec_1"),
            key_argument: Some(KeyText {
                name: "request_id",
                hold,
            }),
            ..Facts::default()
        })
    };
    assert!(render(KeyHold::Held).contains(
        "Call the tool again now with the same arguments and the same `request_id` to get its outcome (Carmy holds"
    ));
    assert!(render(KeyHold::Given("toolu_01D7FLrfh4GYq7yT1ULFeyMV")).contains(
        "Call the tool again now with the same arguments and `request_id` set to \"toolu_01D7FLrfh4GYq7yT1ULFeyMV\" to get its outcome (Carmy holds"
    ));
    assert!(render(KeyHold::Unseen).contains("Retry the same call unchanged to get"));
    // A value is a JSON string: quotes and backslashes are escaped.
    assert!(KeyText {
        name: "k",
        hold: KeyHold::Given("a\"b"),
    }
    .same_key()
    .ends_with("set to \"a\\\"b\""));
}

#[test]
fn a_reused_id_is_refused_with_its_age_and_window_and_sent_to_check_first() {
    let tools = ["find_orders".to_owned()];
    let text = entry(Situation::KeyReused).render(&Facts {
        execution_id: Some("exec_7"),
        read_tools: &tools,
        key_argument: Some(KeyText::held("request_id")),
        reused: Some(("42 min", "10 min")),
        ..Facts::default()
    });
    assert_eq!(
        text,
        "Carmy did not run this call: its `request_id` already names an action whose outcome was recorded 42 min ago (execution exec_7), longer ago than Carmy replays an id a model chose (10 min), because another conversation may have written the same id. This call did not run, and Carmy does not show that earlier outcome: it may belong to another conversation. If you sent that same call earlier in this conversation and never saw its outcome, check with a read-only tool (for example `find_orders`) whether it took effect; if it did, nothing more is needed, and if you cannot tell, ask the user. Only if this is a new action, call again with a new random UUID that you generate now as `request_id`."
    );
    assert_eq!(age(std::time::Duration::from_millis(12_900)), "12 s");
    assert_eq!(age(std::time::Duration::from_secs(119)), "119 s");
    assert_eq!(age(std::time::Duration::from_secs(600)), "10 min");
    assert_eq!(age(std::time::Duration::from_secs(7_200)), "2 h");
    assert_eq!(age(std::time::Duration::from_secs(3 * 86_400)), "3 days");
}
