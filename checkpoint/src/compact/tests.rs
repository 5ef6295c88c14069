//! Tests of the compact event-line forms: each reads back byte for byte.

use super::*;
use proptest::prelude::*;

fn lines(run: RunId, other: RunId) -> Vec<EventRecord> {
    let at = |seq: u32, ts: &str| {
        format!("{{\"v\":1,\"run_id\":\"{run}\",\"seq\":{seq},\"ts\":\"{ts}\",\"e\":1}}")
    };
    let texts = [
        at(1, "2026-12-01T05:36:48.848Z"),
        // The same time: left out; then another time.
        at(2, "2026-12-01T05:36:48.848Z"),
        at(3, "2026-12-01T05:36:48.849Z"),
        at(4, "2026-12-01T05:36:48.849Z"),
        // Another version, and the run's id again further on.
        format!("{{\"v\":12,\"run_id\":\"{run}\",\"seq\":5,\"note\":\"{run}\"}}"),
        // After a line without a time, a time is written again.
        at(6, "2026-12-01T05:36:48.849Z"),
        // Not this run's head: kept whole, and the next time written.
        format!("{{\"v\":1,\"run_id\":\"{other}\",\"seq\":7}}"),
        at(8, "2026-12-01T05:36:48.849Z"),
        // Empty times are never left out.
        at(9, ""),
        at(10, ""),
        "{\"s\":11}".to_owned(),
        "~not json, kept as it was".to_owned(),
        "~~".to_owned(),
        "~7,".to_owned(),
        "~7;\"seq\":1,".to_owned(),
        String::new(),
        format!("{{\"v\":,\"run_id\":\"{run}\",\"seq\":17}}"),
        format!("{{\"v\":1,\"run_id\":\"{run}\"}}"),
        format!("{{\"v\":1,\"run_id\":\"{run}\",\"seq\":19,\"ts\":\"x\",\"e\":2}}"),
        format!("{{\"v\":1,\"run_id\":\"{run}\",\"seq\":20,\"ts\":\"x\",\"e\":3}}"),
        // Nothing after the time: kept with it.
        format!("{{\"v\":1,\"run_id\":\"{run}\",\"seq\":21,\"ts\":\"x\"}}"),
    ];
    texts.into_iter().zip(1..).map(|(json, seq)| EventRecord { seq, json }).collect()
}

#[test]
fn compact_lines_read_back_byte_for_byte() {
    let (run, other) = (RunId::new(), RunId::new());
    let events = lines(run, other);
    let stored = EventRecord::join_compact(run, &events);
    let kept: Vec<&str> = stored.split('\n').collect();
    assert_eq!(kept[0], "~1,\"seq\":1,\"ts\":\"2026-12-01T05:36:48.848Z\",\"e\":1}");
    assert_eq!(kept[1], "~1;\"seq\":2,\"e\":1}", "the same time left out");
    assert!(kept[2].starts_with("~1,\"seq\":3,\"ts\":"), "{}", kept[2]);
    assert!(kept[3].starts_with("~1;"), "{}", kept[3]);
    assert!(kept[4].starts_with("~12,\"seq\":5,"), "{}", kept[4]);
    assert!(kept[5].starts_with("~1,\"seq\":6,\"ts\""), "{}", kept[5]);
    assert!(kept[7].starts_with("~1,\"seq\":8,\"ts\""), "{}", kept[7]);
    assert!(kept[9].starts_with("~1,\"seq\":10,\"ts\":\"\""), "{}", kept[9]);
    assert!(kept[19].starts_with("~1;"), "{}", kept[19]);
    assert!(kept[20].starts_with("~1,"), "{}", kept[20]);
    assert_eq!(stored.matches(&run.to_string()).count(), 3, "the heads left out");
    let mut back = Vec::new();
    EventRecord::split_compact(run, 1, &stored, 0, &mut back);
    assert_eq!(back, events);
    // Lines before `after` still give their time to later ones.
    for after in 0..events.len() as u64 {
        let mut later = Vec::new();
        EventRecord::split_compact(run, 1, &stored, after, &mut later);
        assert_eq!(later, events[after as usize..]);
    }
    // Lines stored whole (before compaction) read the same.
    let mut whole = Vec::new();
    let plain: Vec<EventRecord> =
        events.iter().filter(|e| !e.json.starts_with('~')).cloned().collect();
    EventRecord::split_compact(run, 1, &EventRecord::join_lines(&plain), 0, &mut whole);
    let renumbered: Vec<String> = whole.iter().map(|e| e.json.clone()).collect();
    let expected: Vec<String> = plain.iter().map(|e| e.json.clone()).collect();
    assert_eq!(renumbered, expected);
    let mut none = Vec::new();
    EventRecord::split_compact(run, 1, "", 0, &mut none);
    assert!(none.is_empty());
}

/// A line as the engine writes it: head, `seq`, then `fields`.
fn engine_line(run: RunId, seq: u64, fields: &str) -> EventRecord {
    EventRecord { seq, json: format!("{{\"v\":1,\"run_id\":\"{run}\",\"seq\":{seq},{fields}") }
}

#[test]
fn engine_lines_are_kept_by_fields() {
    let run = RunId::new();
    let events = vec![
        engine_line(
            run,
            14,
            "\"ts\":\"2026-12-01T12:36:01.020Z\",\"node\":\"inc\",\"node_id\":\"inc:5.0\",\
             \"event_type\":\"node_started\",\"step\":5,\"task\":0}",
        ),
        engine_line(
            run,
            15,
            "\"ts\":\"2026-12-01T12:36:01.020Z\",\"node\":\"inc\",\"node_id\":\"inc:5.0\",\
             \"event_type\":\"node_completed\",\"step\":5,\"task\":0,\"update\":{\"n\":1}}",
        ),
        engine_line(
            run,
            16,
            "\"ts\":\"2026-12-01T12:36:01.023Z\",\"event_type\":\"checkpoint_saved\",\
             \"step\":5,\"tasks\":1,\"snapshot\":false}",
        ),
        // A node instance not named after the step and task: kept.
        engine_line(
            run,
            17,
            "\"ts\":\"2026-12-01T12:36:02.000Z\",\"node\":\"agent\",\"node_id\":\"agent:6.1\",\
             \"event_type\":\"model_started\",\"agent\":\"a\",\"call_id\":\"c\"}",
        ),
        // No time, then a time again.
        engine_line(run, 18, "\"event_type\":\"run_ended\",\"status\":\"completed\"}"),
        engine_line(run, 19, "\"ts\":\"x\",\"event_type\":\"run_started\"}"),
    ];
    let stored = EventRecord::join_compact(run, &events);
    let kept: Vec<&str> = stored.split('\n').collect();
    assert_eq!(
        kept,
        [
            "~1|@2026-12-01T12:36:01.020Z|inc|+|node_started|,\"step\":5,\"task\":0}",
            "~1|=|inc|+|node_completed|,\"step\":5,\"task\":0,\"update\":{\"n\":1}}",
            "~1|22:3Z|-|-|checkpoint_saved|,\"step\":5,\"tasks\":1,\"snapshot\":false}",
            "~1|18:2.000Z|agent|agent:6.1|model_started|,\"agent\":\"a\",\"call_id\":\"c\"}",
            "~1|-|-|-|run_ended|,\"status\":\"completed\"}",
            "~1|@x|-|-|run_started|}",
        ]
    );
    let whole: usize = events.iter().map(|e| e.json.len() + 1).sum();
    assert!(stored.len() * 2 < whole, "{} of {whole} bytes", stored.len());
    let mut back = Vec::new();
    EventRecord::split_compact(run, 14, &stored, 0, &mut back);
    assert_eq!(back, events);
    for after in 14..20 {
        let mut later = Vec::new();
        EventRecord::split_compact(run, 14, &stored, after, &mut later);
        assert_eq!(later, events[(after - 13) as usize..]);
    }
}

#[test]
fn lines_the_fields_would_not_give_back_take_another_form() {
    let run = RunId::new();
    let odd = [
        // A number that is not the record's, or not written plainly.
        (1, "\"seq\":2,\"event_type\":\"e\"}"),
        (2, "\"seq\":02,\"event_type\":\"e\"}"),
        // Fields holding the separator, an escape or a marker.
        (3, "\"seq\":3,\"ts\":\"a|b\",\"event_type\":\"e\"}"),
        (4, "\"seq\":4,\"node\":\"a|b\",\"event_type\":\"e\"}"),
        (5, "\"seq\":5,\"node\":\"a\\\"b\",\"event_type\":\"e\"}"),
        (6, "\"seq\":6,\"node\":\"-\",\"event_type\":\"e\"}"),
        (7, "\"seq\":7,\"node\":\"n\",\"node_id\":\"+\",\"event_type\":\"e\"}"),
        (8, "\"seq\":8,\"node_id\":\"-\",\"event_type\":\"e\"}"),
        (9, "\"seq\":9,\"event_type\":\"a|b\"}"),
        (10, "\"seq\":10,\"event_type\":\"a\\\"b\"}"),
        // Fields in another order, or no event type.
        (11, "\"seq\":11,\"node\":\"n\",\"ts\":\"t\",\"event_type\":\"e\"}"),
        (12, "\"seq\":12,\"ts\":\"t\",\"kind\":\"e\"}"),
    ];
    let events: Vec<EventRecord> = odd
        .iter()
        .map(|(seq, rest)| EventRecord {
            seq: *seq,
            json: format!("{{\"v\":1,\"run_id\":\"{run}\",{rest}"),
        })
        .collect();
    let stored = EventRecord::join_compact(run, &events);
    for line in stored.split('\n') {
        assert!(!line.starts_with("~1|"), "{line}");
    }
    let mut back = Vec::new();
    EventRecord::split_compact(run, 1, &stored, 0, &mut back);
    assert_eq!(back, events);
}

#[test]
fn damaged_field_lines_read_as_they_are() {
    let run = RunId::new();
    // No line before to take a time from, a prefix past its end, and
    // too few fields: each comes back as stored (without its `~`).
    for stored in ["~1|=|-|-|e|}", "~1|40:x|-|-|e|}", "~1|-|-|e"] {
        let mut back = Vec::new();
        EventRecord::split_compact(run, 1, stored, 0, &mut back);
        assert_eq!(back[0].json, &stored[1..]);
    }
    // An instance to put back from a line without step and task.
    let mut back = Vec::new();
    EventRecord::split_compact(run, 3, "~1|-|n|+|e|}", 0, &mut back);
    let head = format!("{{\"v\":1,\"run_id\":\"{run}\",\"seq\":3,");
    assert_eq!(
        back[0].json,
        format!("{head}\"node\":\"n\",\"node_id\":null,\"event_type\":\"e\"}}")
    );
}

fn piece() -> impl Strategy<Value = String> {
    prop_oneof![
        Just(String::new()),
        Just("-".to_owned()),
        Just("+".to_owned()),
        Just("=".to_owned()),
        Just("|".to_owned()),
        Just("\\\"".to_owned()),
        Just("@".to_owned()),
        Just("12:".to_owned()),
        Just("é".to_owned()),
        "[a-z0-9:.|~@=+-]{0,6}",
    ]
}

/// What a generated line is made of (see `render`).
type Parts = ((u8, Option<String>, Option<String>), (u8, String, u8, u64, u32, String));

fn parts() -> impl Strategy<Value = Parts> {
    let times = prop_oneof![
        Just("2026-12-01T12:36:01.020Z".to_owned()),
        Just("2026-12-01T12:36:01.021Z".to_owned()),
        Just("2026-12-01T12:37:00.000Z".to_owned()),
        Just("2026-12-01T12:36:01.020Zé".to_owned()),
        Just("2026-12-01T12:36:01.020Zè".to_owned()),
        piece(),
    ];
    (
        (0u8..5, proptest::option::of(times), proptest::option::of(piece())),
        (0u8..4, piece(), 0u8..4, 0u64..12, 0u32..3, piece()),
    )
}

/// Line `seq` of `run`: an engine line, or one that only looks like it
/// (another number, another run's head, a leading `~`, another
/// version), with or without each field, a node instance named after
/// the step and task or not, and arbitrary text where text goes.
fn render(run: RunId, other: RunId, seq: u64, parts: &Parts) -> EventRecord {
    let ((kind, ts, node), (id_kind, id, rest_kind, step, task, tail)) = parts;
    let mut json = match kind {
        0 => format!("{{\"v\":1,\"run_id\":\"{run}\",\"seq\":{seq},"),
        1 => format!("{{\"v\":1,\"run_id\":\"{run}\",\"seq\":{},", seq + 1),
        2 => format!("{{\"v\":1,\"run_id\":\"{other}\",\"seq\":{seq},"),
        3 => format!("~{{\"v\":1,\"run_id\":\"{run}\",\"seq\":{seq},"),
        _ => format!("{{\"v\":7,\"run_id\":\"{run}\",\"seq\":{seq},"),
    };
    if let Some(ts) = ts {
        json.push_str(&format!("\"ts\":\"{ts}\","));
    }
    if let Some(node) = node {
        json.push_str(&format!("\"node\":\"{node}\","));
    }
    let name = node.as_deref().unwrap_or_default();
    match id_kind {
        0 => {}
        1 => json.push_str(&format!("\"node_id\":\"{name}:{step}.{task}\",")),
        2 => json.push_str(&format!("\"node_id\":\"{name}:{step}.{}\",", task + 1)),
        _ => json.push_str(&format!("\"node_id\":\"{id}\",")),
    }
    match rest_kind {
        0 => json.push_str(&format!(
            "\"event_type\":\"node_started\",\"step\":{step},\"task\":{task}{tail}}}"
        )),
        1 => json.push_str(&format!("\"event_type\":\"{tail}\"}}")),
        2 => json.push_str(&format!("\"event_type\":\"e\",\"step\":{step}}}")),
        _ => json.push_str(&format!("\"kind\":\"{tail}\"}}")),
    }
    EventRecord { seq, json }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1024))]

    /// Whatever the lines, the stored form reads back byte for byte,
    /// from any point.
    #[test]
    fn any_lines_read_back_byte_for_byte(lines in proptest::collection::vec(parts(), 1..8)) {
        let (run, other) = (RunId::new(), RunId::new());
        let events: Vec<EventRecord> =
            lines.iter().zip(40..).map(|(parts, seq)| render(run, other, seq, parts)).collect();
        let stored = EventRecord::join_compact(run, &events);
        for after in 39..40 + events.len() as u64 {
            let mut back = Vec::new();
            EventRecord::split_compact(run, 40, &stored, after, &mut back);
            prop_assert_eq!(&back[..], &events[(after - 39) as usize..]);
        }
    }
}
