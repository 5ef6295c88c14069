//! Names from files, made safe to print.

/// `text` with control characters (newlines, escapes, carriage returns)
/// written as escapes (`\u{1b}`), so that a name from a file cannot forge
/// lines or colours on a terminal.
pub fn printable(text: &str) -> String {
    if !text.chars().any(char::is_control) {
        return text.to_owned();
    }
    text.chars()
        .map(|c| if c.is_control() { c.escape_unicode().to_string() } else { c.to_string() })
        .collect()
}
