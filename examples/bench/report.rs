//! The figures as a table (or JSON lines with `--json`).

use serde_json::Value;

/// Prints every workload's line.
pub(crate) fn print(results: &[Value], json: bool) {
    for result in results {
        if json {
            println!("{result}");
        } else if let Some(skipped) = result.get("skipped") {
            println!("{:<10} skipped: {skipped}", result["workload"].as_str().unwrap_or("?"));
        } else if let Some(p50) = result.get("inbox_first_render_ms_p50") {
            println!(
                "{:<10} runs={} inbox first render p50 {:.1} ms max {:.1} ms (target 300 ms); all runs p50 {:.1} ms",
                "page_render", result["runs"], p50.as_f64().unwrap_or(f64::NAN),
                result["inbox_first_render_ms_max"].as_f64().unwrap_or(f64::NAN),
                result["all_runs_first_render_ms_p50"].as_f64().unwrap_or(f64::NAN),
            );
        } else if let Some(p50) = result.get("p50_us") {
            println!(
                "{:<24} n={:<6} p50 {:>9.1} us  p99 {:>9.1} us",
                result["workload"].as_str().unwrap_or("?"),
                result["n"],
                p50.as_f64().unwrap_or(f64::NAN),
                result["p99_us"].as_f64().unwrap_or(f64::NAN),
            );
        } else if let Some(same) = result.get("same_process_ms") {
            let cross = &result["cross_process_ms"];
            println!(
                "{:<10} n={:<6} same process p50 {:.2} ms p99 {:.2} ms; across processes p50 {:.2} ms p99 {:.2} ms",
                "stream_latency", result["n"], same["p50"].as_f64().unwrap_or(f64::NAN),
                same["p99"].as_f64().unwrap_or(f64::NAN), cross["p50"].as_f64().unwrap_or(f64::NAN),
                cross["p99"].as_f64().unwrap_or(f64::NAN),
            );
        } else {
            println!(
                "{:<10} n={:<6} {:>8.3} s  {:>9.2} us/step  db {:>9} B  rss {:.1} MB{}",
                result["workload"].as_str().unwrap_or("?"),
                result["n"],
                result["seconds"].as_f64().unwrap_or(f64::NAN),
                result["per_step_us"].as_f64().unwrap_or(f64::NAN),
                result["db_bytes"],
                result["peak_rss_mb"].as_f64().unwrap_or(f64::NAN),
                extra_units(result),
            );
        }
    }
}

/// The workload's own figures, each with the unit its field name says:
/// `_us` microseconds, `_ms` milliseconds, `per_run` / `per_page` / `_per_s`
/// as named.
fn extra_units(result: &Value) -> String {
    let Some(fields) = result.as_object() else { return String::new() };
    let common =
        ["workload", "n", "seconds", "per_step_us", "db_bytes", "peak_rss_mb", "checkpoints"];
    let mut out = String::new();
    for (name, value) in fields.iter().filter(|(name, _)| !common.contains(&name.as_str())) {
        let unit = if name.contains("_us") {
            " us"
        } else if name.contains("_ms") {
            " ms"
        } else if name.ends_with("_per_s") {
            " /s"
        } else {
            ""
        };
        match value.as_f64() {
            Some(number) if !value.is_u64() => out.push_str(&format!("  {name} {number:.2}{unit}")),
            _ => out.push_str(&format!("  {name} {value}{unit}")),
        }
    }
    out
}
