//! Time for events and records: the [`Clock`] a run reads, and RFC 3339
//! as the stores and APIs write it.

/// Source of wall-clock time for events and records; inject a fixed clock
/// for reproducible logs.
pub trait Clock: Send + Sync + std::fmt::Debug {
    /// Milliseconds since the Unix epoch.
    fn now_ms(&self) -> i64;
}

/// The system clock.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_ms(&self) -> i64 {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |elapsed| elapsed.as_millis() as i64)
    }
}

/// Formats milliseconds since the Unix epoch as RFC 3339 UTC
/// (`2026-11-30T07:39:48.123Z`).
pub fn format_rfc3339(ms: i64) -> String {
    let fields = civil(ms);
    if !(0..=9999).contains(&fields[0]) {
        // Outside four-digit years (never for a real clock).
        return with_format(fields);
    }
    // Written digit by digit: `format!` costs several times as much, and
    // every event carries a time.
    let mut text = String::with_capacity(24);
    let (widths, after) = ([4, 2, 2, 2, 2, 2, 3], ['-', '-', 'T', ':', ':', '.', 'Z']);
    for ((value, width), after) in fields.into_iter().zip(widths).zip(after) {
        push_padded(&mut text, value as u64, width);
        text.push(after);
    }
    text
}

/// Year, month, day, hour, minute, second and millisecond (UTC) of `ms`
/// milliseconds since the Unix epoch.
fn civil(ms: i64) -> [i64; 7] {
    let secs = ms.div_euclid(1000);
    let millis = ms.rem_euclid(1000);
    let days = secs.div_euclid(86_400);
    let of_day = secs.rem_euclid(86_400);
    // Civil-from-days (H. Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    [year, month, day, of_day / 3600, of_day % 3600 / 60, of_day % 60, millis]
}

/// [`civil`]'s fields as RFC 3339, with `format!`.
fn with_format([year, month, day, hour, minute, second, millis]: [i64; 7]) -> String {
    format!("{year:04}-{month:02}-{day:02}T{hour:02}:{minute:02}:{second:02}.{millis:03}Z")
}

/// Appends `value` in decimal, zero-padded to `width` digits (at most 20).
pub(crate) fn push_padded(text: &mut String, mut value: u64, width: usize) {
    let mut digits = [b'0'; 20];
    let mut at = digits.len();
    while value > 0 || at == digits.len() {
        at -= 1;
        digits[at] = b'0' + (value % 10) as u8;
        value /= 10;
    }
    let start = at.min(digits.len() - width.min(digits.len()));
    for &digit in &digits[start..] {
        text.push(char::from(digit));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc3339_is_what_format_wrote() {
        // Field boundaries, the ends of the four-digit years, and random
        // instants in between.
        let mut instants = vec![0i64, 9, 99, 999, 1_000, 59_999, 3_599_999, 86_399_999];
        instants.extend([-62_167_219_200_000, 253_402_300_799_999, 951_868_799_999]);
        let mut state = 0x2545_f491_4f6c_dd1du64;
        for _ in 0..5_000 {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            instants.push((state % 316_000_000_000_000) as i64 - 62_167_219_200_000);
        }
        for ms in instants {
            assert_eq!(format_rfc3339(ms), with_format(civil(ms)), "{ms}");
        }
        let mut padded = String::new();
        push_padded(&mut padded, 7, 3);
        push_padded(&mut padded, 0, 1);
        push_padded(&mut padded, 12_345, 2);
        push_padded(&mut padded, u64::MAX, 2);
        assert_eq!(padded, format!("007012345{}", u64::MAX));
    }

    #[test]
    fn rfc3339_matches_known_instants() {
        let cases = [
            (0, "1970-01-01T00:00:00.000Z"),
            (951_782_400_000, "2000-02-29T00:00:00.000Z"),
            (1_795_937_988_123, "2026-11-29T07:39:48.123Z"),
            (-1, "1969-12-31T23:59:59.999Z"),
        ];
        for (ms, text) in cases {
            assert_eq!(format_rfc3339(ms), text, "{ms}");
        }
    }
}
