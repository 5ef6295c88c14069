//! Event lines as stores keep them: without the head every line of a run
//! repeats, and without a time equal to the line before's.

use crate::event::EventRecord;
use crate::ids::RunId;

/// What starts a line stored without the head every line of its run
/// repeats ([`EventRecord::join_compact`]). A JSON line never starts so.
const COMPACT: char = '~';

impl EventRecord {
    /// Like [`EventRecord::join_lines`], each line kept without the head
    /// that every line of `run` repeats: `{"v":N,"run_id":"RUN",` becomes
    /// `~N,` (42 bytes fewer a line), and `~N;` when the line's time (its
    /// `"ts"` right after `"seq"`) is the previous line's, which is then
    /// left out too (32 bytes more). Lines without that head are kept as
    /// they are (one starting with `~`, which no JSON line does, gets a
    /// second `~`). [`EventRecord::split_compact`] gives back the lines
    /// byte for byte. Both stores of this workspace keep a transition's
    /// events this way; another store may too, or keep
    /// [`EventRecord::join_lines`] (the split reads both).
    pub fn join_compact(run: RunId, events: &[EventRecord]) -> String {
        let mut buf = [0; ulid::ULID_LEN];
        let run = run.text_in(&mut buf);
        let mut lines = String::with_capacity(events.iter().map(|e| e.json.len() + 1).sum());
        let mut last_ts: Option<&str> = None;
        for (i, event) in events.iter().enumerate() {
            if i > 0 {
                lines.push('\n');
            }
            let line = event.json.as_str();
            let Some((version, rest)) = compact_parts(run, line) else {
                if line.starts_with(COMPACT) {
                    lines.push(COMPACT);
                }
                lines.push_str(line);
                last_ts = None;
                continue;
            };
            lines.push(COMPACT);
            lines.push_str(version);
            match timed(rest) {
                Some((seq, ts, after)) if !ts.is_empty() && last_ts == Some(ts) => {
                    lines.push(SAME_TIME);
                    lines.push_str(seq);
                    lines.push_str(after);
                }
                timing => {
                    lines.push(',');
                    lines.push_str(rest);
                    last_ts = timing.map(|(_, ts, _)| ts);
                }
            }
        }
        lines
    }

    /// Splits what [`EventRecord::join_compact`] (or
    /// [`EventRecord::join_lines`]) made for `run`, numbering from
    /// `first_seq`, and appends the events with `seq > after` to `out`.
    pub fn split_compact(
        run: RunId,
        first_seq: u64,
        lines: &str,
        after: u64,
        out: &mut Vec<EventRecord>,
    ) {
        if lines.is_empty() {
            return;
        }
        let mut buf = [0; ulid::ULID_LEN];
        let run = run.text_in(&mut buf);
        let mut last_ts = String::new();
        for (offset, stored) in lines.split('\n').enumerate() {
            let seq = first_seq + offset as u64;
            // Every line is expanded: a later one may take its time.
            let json = expand(run, stored, &mut last_ts);
            if seq > after {
                out.push(EventRecord { seq, json });
            }
        }
    }
}

/// Marks a compact line whose time is the previous line's.
const SAME_TIME: char = ';';

/// The version digits and the rest of `line` when it starts with the head
/// of `run`'s lines.
fn compact_parts<'l>(run: &str, line: &'l str) -> Option<(&'l str, &'l str)> {
    let tail = line.strip_prefix("{\"v\":")?;
    let digits = tail.bytes().take_while(u8::is_ascii_digit).count();
    if digits == 0 {
        return None;
    }
    let rest = tail[digits..].strip_prefix(",\"run_id\":\"")?.strip_prefix(run)?;
    Some((&tail[..digits], rest.strip_prefix("\",")?))
}

/// `"seq":N,`, the time and what follows `"ts":"TIME",` when `rest` (a
/// line after its head) starts with those two fields.
fn timed(rest: &str) -> Option<(&str, &str, &str)> {
    let digits = rest.strip_prefix("\"seq\":")?.bytes().take_while(u8::is_ascii_digit).count();
    let seq_end = "\"seq\":".len() + digits;
    let after_seq = rest[seq_end..].strip_prefix(",\"ts\":\"").filter(|_| digits > 0)?;
    let (ts, after) = after_seq.split_once('"')?;
    let after = after.strip_prefix(',')?;
    Some((&rest[..seq_end + 1], ts, after))
}

/// A stored line as it was written; `last_ts` is the previous line's time
/// (updated to this line's).
fn expand(run: &str, stored: &str, last_ts: &mut String) -> String {
    let Some(compact) = stored.strip_prefix(COMPACT) else {
        last_ts.clear();
        return stored.to_owned();
    };
    let digits = compact.bytes().take_while(u8::is_ascii_digit).count();
    let mut line = String::with_capacity(stored.len() + run.len() + 60);
    let (version, marked) = compact.split_at(digits);
    let push_head = |line: &mut String| {
        line.push_str("{\"v\":");
        line.push_str(version);
        line.push_str(",\"run_id\":\"");
        line.push_str(run);
        line.push_str("\",");
    };
    match (digits > 0, marked.strip_prefix(','), marked.strip_prefix(SAME_TIME)) {
        (true, Some(rest), _) => {
            push_head(&mut line);
            line.push_str(rest);
            last_ts.clear();
            if let Some((_, ts, _)) = timed(rest) {
                last_ts.push_str(ts);
            }
        }
        (true, _, Some(rest)) if !last_ts.is_empty() => {
            // `"seq":N,` then the rest: the time goes between.
            let seq_end = rest.find(',').map_or(rest.len(), |at| at + 1);
            push_head(&mut line);
            line.push_str(&rest[..seq_end]);
            line.push_str("\"ts\":\"");
            line.push_str(last_ts);
            line.push_str("\",");
            line.push_str(&rest[seq_end..]);
        }
        // A line that started with `~` itself, kept with a second one.
        _ => {
            last_ts.clear();
            line.push_str(compact);
        }
    }
    line
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
