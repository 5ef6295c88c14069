//! Event lines as stores keep them: without what every line of a run
//! repeats (its head), and without what the line gives twice or the row
//! already holds (its sequence number, a time shared with the line before,
//! a node instance named after the node, step and task).

use std::fmt::Write;

use crate::event::EventRecord;
use crate::ids::RunId;

/// What starts a line stored without the head every line of its run
/// repeats ([`EventRecord::join_compact`]). A JSON line never starts so.
const COMPACT: char = '~';

/// Separates the fields of a line stored by fields (`~V|…`).
const FIELD: char = '|';

impl EventRecord {
    /// Like [`EventRecord::join_lines`], each line kept without the head
    /// that every line of `run` repeats (`{"v":N,"run_id":"RUN",`), in the
    /// first of these forms that gives the line back exactly:
    ///
    /// - **By fields**, `~N|TIME|NODE|INSTANCE|TYPE|REST`, for an engine
    ///   event (`"seq"`, then optionally `"ts"`, `"node"` and `"node_id"`,
    ///   then `"event_type"`, then `REST`, the rest of the line). The
    ///   sequence number is left out (it is the record's). `TIME` is `-`
    ///   (none), `=` (the line before's), `K:SUFFIX` (the first `K` bytes
    ///   of the line before's, then `SUFFIX`) or `@TIME`. `NODE` is `-`
    ///   (none) or the name. `INSTANCE` is `-` (none), `+` (the node's
    ///   name, `:`, the step and `.`, the task, as `REST` starts with
    ///   `,"step":S,"task":T`) or the `node_id` itself. Lines whose fields
    ///   hold `|`, `\` or would read ambiguously take another form.
    /// - `~N,` then the rest of the line, or `~N;` when its time (`"ts"`
    ///   right after `"seq"`) is the line before's, which is left out too
    ///   (the form lines of schema version 9 took).
    /// - Whole, for a line without that head (one starting with `~`, which
    ///   no JSON line does, gets a second `~`).
    ///
    /// [`EventRecord::split_compact`] gives back the lines byte for byte.
    /// Both stores of this workspace keep a transition's events this way;
    /// another store may too, or keep [`EventRecord::join_lines`] (the
    /// split reads every form).
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
            if let Some(fields) = Fields::of(rest, event.seq) {
                fields.write(last_ts, &mut lines);
                last_ts = fields.ts();
                continue;
            }
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
        let mut last_ts = None;
        for (offset, stored) in lines.split('\n').enumerate() {
            let seq = first_seq + offset as u64;
            // Every line is expanded: a later one may take its time.
            let json = expand(run, seq, stored, &mut last_ts);
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

/// An engine event's line after its head, by fields.
#[derive(Debug, Clone, Copy)]
struct Fields<'l> {
    time: Time<'l>,
    node: Option<&'l str>,
    instance: Instance<'l>,
    event_type: &'l str,
    rest: &'l str,
}

/// How a line's `"ts"` is kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Time<'l> {
    /// The line has none.
    Absent,
    /// The line before's.
    Same,
    /// The line before's first bytes, then the text.
    Shared(usize, &'l str),
    /// As it is.
    Full(&'l str),
}

/// How a line's `"node_id"` is kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Instance<'l> {
    /// The line has none.
    Absent,
    /// Named after the node, the step and the task (put back from those).
    Derived,
    /// As it is.
    Kept(&'l str),
}

/// `text` split at its first `byte` (an ASCII one, so both halves are
/// whole characters).
fn split_at_byte(text: &str, byte: u8) -> Option<(&str, &str)> {
    let at = text.bytes().position(|b| b == byte)?;
    Some((&text[..at], &text[at + 1..]))
}

/// A JSON string's text up to its closing quote, and what follows the
/// quote, when the text holds no escape and no [`FIELD`].
fn plain(text: &str) -> Option<(&str, &str)> {
    let at = text.bytes().position(|b| matches!(b, b'"' | b'\\' | b'|'))?;
    (text.as_bytes()[at] == b'"').then(|| (&text[..at], &text[at + 1..]))
}

/// Appends `"key":"TEXT",`, `TEXT` the `parts` joined (plain text: what
/// [`plain`] read, needing no escape).
fn push_text(out: &mut String, key: &str, parts: &[&str]) {
    out.push('"');
    out.push_str(key);
    out.push_str("\":\"");
    parts.iter().for_each(|part| out.push_str(part));
    out.push_str("\",");
}

/// Appends `n` in decimal.
fn push_number(out: &mut String, n: u64) {
    // Writing to a `String` cannot fail.
    let _ = write!(out, "{n}");
}

impl<'l> Fields<'l> {
    /// The fields of `rest` when it is an engine event's line numbered
    /// `seq` that the field form gives back exactly.
    fn of(rest: &'l str, seq: u64) -> Option<Self> {
        let (number, mut rest) = split_at_byte(rest.strip_prefix("\"seq\":")?, b',')?;
        if number.parse::<u64>().ok()? != seq || (number.len() > 1 && number.starts_with('0')) {
            return None;
        }
        // An optional `"key":"TEXT",`.
        let mut string = |key: &str| -> Option<Option<&'l str>> {
            let Some(value) = rest.strip_prefix(key) else {
                return Some(None);
            };
            let (value, after) = plain(value)?;
            rest = after.strip_prefix(',')?;
            Some(Some(value))
        };
        let ts = string("\"ts\":\"")?;
        let node = string("\"node\":\"")?;
        let instance = string("\"node_id\":\"")?;
        let (event_type, rest) = plain(rest.strip_prefix("\"event_type\":\"")?)?;
        let instance = match (instance, node) {
            (_, Some("-")) => return None,
            (None, _) => Instance::Absent,
            (Some(id), Some(node)) if derived(node, rest).is_some_and(|d| d.is(id)) => {
                Instance::Derived
            }
            (Some("-" | "+"), _) => return None,
            (Some(id), _) => Instance::Kept(id),
        };
        let time = ts.map_or(Time::Absent, Time::Full);
        Some(Self { time, node, instance, event_type, rest })
    }

    /// The line's time, as [`Fields::of`] found it.
    fn ts(&self) -> Option<&'l str> {
        match self.time {
            Time::Full(ts) => Some(ts),
            _ => None,
        }
    }

    /// Appends the form after `~N`; `last_ts` is the line before's time.
    fn write(&self, last_ts: Option<&str>, out: &mut String) {
        out.push(FIELD);
        match (self.ts(), last_ts) {
            (None, _) => out.push('-'),
            (Some(ts), Some(last)) if ts == last => out.push('='),
            (Some(ts), last) => {
                let last = last.unwrap_or_default();
                let mut shared = ts.bytes().zip(last.bytes()).take_while(|(a, b)| a == b).count();
                while !ts.is_char_boundary(shared) {
                    shared -= 1;
                }
                if shared >= 4 {
                    push_number(out, shared as u64);
                    out.push(':');
                    out.push_str(&ts[shared..]);
                } else {
                    out.push('@');
                    out.push_str(ts);
                }
            }
        }
        out.push(FIELD);
        out.push_str(self.node.unwrap_or("-"));
        out.push(FIELD);
        match self.instance {
            Instance::Absent => out.push('-'),
            Instance::Derived => out.push('+'),
            Instance::Kept(id) => out.push_str(id),
        }
        out.push(FIELD);
        out.push_str(self.event_type);
        out.push(FIELD);
        out.push_str(self.rest);
    }

    /// Reads the form after `~N|`.
    fn read(stored: &'l str) -> Option<Self> {
        let (time, stored) = split_at_byte(stored, b'|')?;
        let (node, stored) = split_at_byte(stored, b'|')?;
        let (instance, stored) = split_at_byte(stored, b'|')?;
        let (event_type, rest) = split_at_byte(stored, b'|')?;
        let time = match time {
            "-" => Time::Absent,
            "=" => Time::Same,
            _ => match time.strip_prefix('@') {
                Some(ts) => Time::Full(ts),
                None => {
                    let (shared, suffix) = split_at_byte(time, b':')?;
                    Time::Shared(shared.parse().ok()?, suffix)
                }
            },
        };
        let node = (node != "-").then_some(node);
        let instance = match instance {
            "-" => Instance::Absent,
            "+" => Instance::Derived,
            id => Instance::Kept(id),
        };
        Some(Self { time, node, instance, event_type, rest })
    }
}

/// The step and task a node instance is named after, when `rest` (what
/// follows a line's `"event_type"`) starts with them.
struct Derived<'l> {
    node: &'l str,
    step: &'l str,
    task: &'l str,
}

impl Derived<'_> {
    /// Whether `id` is `node:step.task`.
    fn is(&self, id: &str) -> bool {
        id.strip_prefix(self.node)
            .and_then(|id| id.strip_prefix(':'))
            .and_then(|id| id.strip_prefix(self.step))
            .and_then(|id| id.strip_prefix('.'))
            .is_some_and(|task| task == self.task)
    }
}

fn derived<'l>(node: &'l str, rest: &'l str) -> Option<Derived<'l>> {
    let number = |text: &'l str| {
        let digits = text.bytes().take_while(u8::is_ascii_digit).count();
        (digits > 0).then(|| text.split_at(digits))
    };
    let (step, rest) = number(rest.strip_prefix(",\"step\":")?)?;
    let (task, _) = number(rest.strip_prefix(",\"task\":")?)?;
    Some(Derived { node, step, task })
}

/// A stored line as it was written (line number `seq`); `last_ts` is the
/// previous line's time (updated to this line's).
fn expand(run: &str, seq: u64, stored: &str, last_ts: &mut Option<String>) -> String {
    let Some(compact) = stored.strip_prefix(COMPACT) else {
        *last_ts = None;
        return stored.to_owned();
    };
    let digits = compact.bytes().take_while(u8::is_ascii_digit).count();
    let mut line = String::with_capacity(stored.len() + run.len() + 80);
    let (version, marked) = compact.split_at(digits);
    let push_head = |line: &mut String| {
        line.push_str("{\"v\":");
        line.push_str(version);
        line.push_str(",\"run_id\":\"");
        line.push_str(run);
        line.push_str("\",");
    };
    // The time must be one the line before can give.
    let fields =
        marked.strip_prefix(FIELD).filter(|_| digits > 0).and_then(Fields::read).filter(|fields| {
            match (fields.time, last_ts.as_deref()) {
                (Time::Same, last) => last.is_some(),
                (Time::Shared(shared, _), last) => {
                    last.is_some_and(|ts| ts.is_char_boundary(shared))
                }
                _ => true,
            }
        });
    if let Some(fields) = fields {
        push_head(&mut line);
        push_fields(&mut line, seq, &fields, last_ts);
        return line;
    }
    match (digits > 0, marked.strip_prefix(','), marked.strip_prefix(SAME_TIME)) {
        (true, Some(rest), _) => {
            push_head(&mut line);
            line.push_str(rest);
            *last_ts = timed(rest).map(|(_, ts, _)| ts.to_owned());
        }
        (true, _, Some(rest)) if last_ts.as_deref().is_some_and(|ts| !ts.is_empty()) => {
            // `"seq":N,` then the rest: the time goes between.
            let seq_end = rest.find(',').map_or(rest.len(), |at| at + 1);
            push_head(&mut line);
            line.push_str(&rest[..seq_end]);
            line.push_str("\"ts\":\"");
            line.push_str(last_ts.as_deref().unwrap_or_default());
            line.push_str("\",");
            line.push_str(&rest[seq_end..]);
        }
        // A line that started with `~` itself, kept with a second one.
        _ => {
            *last_ts = None;
            line.push_str(compact);
        }
    }
    line
}

/// The rest of a line written with its fields apart (after its head):
/// `seq`, the time (from the line before where shared; `last_ts` moves to
/// this line's), node, node id, event type and the rest as written.
fn push_fields(line: &mut String, seq: u64, fields: &Fields<'_>, last_ts: &mut Option<String>) {
    line.push_str("\"seq\":");
    push_number(line, seq);
    line.push(',');
    match (fields.time, last_ts.as_mut()) {
        (Time::Absent, _) => *last_ts = None,
        (Time::Same, _) => {}
        (Time::Shared(shared, suffix), Some(ts)) => {
            ts.truncate(shared);
            ts.push_str(suffix);
        }
        (Time::Full(text), Some(ts)) => {
            ts.clear();
            ts.push_str(text);
        }
        (Time::Full(text), None) => *last_ts = Some(text.to_owned()),
        // Refused by `expand`.
        (Time::Shared(..), None) => {}
    }
    if let (Some(ts), false) = (last_ts.as_deref(), fields.time == Time::Absent) {
        push_text(line, "ts", &[ts]);
    }
    if let Some(node) = fields.node {
        push_text(line, "node", &[node]);
    }
    let derived = fields.node.and_then(|node| derived(node, fields.rest));
    match (fields.instance, derived) {
        (Instance::Absent, _) => {}
        (Instance::Derived, Some(d)) => {
            push_text(line, "node_id", &[d.node, ":", d.step, ".", d.task]);
        }
        // Written only where it can be put back: a damaged line.
        (Instance::Derived, None) => line.push_str("\"node_id\":null,"),
        (Instance::Kept(id), _) => push_text(line, "node_id", &[id]),
    }
    line.push_str("\"event_type\":\"");
    line.push_str(fields.event_type);
    line.push('"');
    line.push_str(fields.rest);
}

#[cfg(test)]
mod tests;
