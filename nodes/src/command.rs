//! Command tools: a program that reads JSON arguments on stdin and writes
//! a JSON result on stdout.

use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use async_trait::async_trait;
use serde_json::Value;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::Command;

use crate::error::HarnessError;
use crate::tool::{Tool, ToolContext, ToolSpec};

/// Default limit of one command tool call.
pub const DEFAULT_COMMAND_TIMEOUT: Duration = Duration::from_secs(60);

/// Standard error kept for a failure message.
const STDERR_TAIL: usize = 2_000;

/// A tool that runs a program: the arguments go to its stdin as one JSON
/// object, its stdout must hold one JSON value (the whole output, or its
/// last non-empty line, so a program may print progress before it). The
/// program is started directly, never through a shell, so nothing in the
/// arguments is interpreted. Every stdout and stderr line is reported as a
/// `tool_delta` event. The program's environment is cleared down to
/// [`BASE_CHILD_ENV`](crate::BASE_CHILD_ENV), the variables named with
/// [`CommandTool::inherit_env`] and those set with [`CommandTool::envs`];
/// it gains `TOLLGATE_CALL_ID` and `TOLLGATE_IDEMPOTENCY_KEY`. A call that outlives its timeout is killed,
/// and so is one whose future is dropped.
#[derive(Debug, Clone)]
pub struct CommandTool {
    spec: ToolSpec,
    program: PathBuf,
    args: Vec<String>,
    dir: Option<PathBuf>,
    timeout: Duration,
    inherit: Vec<String>,
    env: std::collections::BTreeMap<String, String>,
}

impl CommandTool {
    /// Runs `command[0]` with `command[1..]` as its arguments.
    pub fn new(spec: ToolSpec, program: impl Into<PathBuf>, args: Vec<String>) -> Self {
        Self {
            spec,
            program: program.into(),
            args,
            dir: None,
            timeout: DEFAULT_COMMAND_TIMEOUT,
            inherit: Vec::new(),
            env: std::collections::BTreeMap::new(),
        }
    }

    /// Lets the program see these variables of this process's environment
    /// (besides [`BASE_CHILD_ENV`](crate::BASE_CHILD_ENV)).
    pub fn inherit_env(mut self, names: &[String]) -> Self {
        self.inherit = names.to_vec();
        self
    }

    /// Sets these variables for the program.
    pub fn envs(mut self, vars: std::collections::BTreeMap<String, String>) -> Self {
        self.env.extend(vars);
        self
    }

    /// Runs it in `dir` (a relative program path is resolved there too).
    pub fn dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.dir = Some(dir.into());
        self
    }

    /// Kills it after `timeout` ([`DEFAULT_COMMAND_TIMEOUT`] by default).
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    fn program_name(&self) -> String {
        self.program.display().to_string()
    }

    async fn run(&self, args: Value, ctx: &ToolContext) -> Result<Value, HarnessError> {
        let program = self.program_name();
        let io = |source| HarnessError::CommandIo { program: program.clone(), source };
        let path = match (
            &self.dir,
            self.program.is_relative() && self.program.components().count() > 1,
        ) {
            (Some(dir), true) => dir.join(&self.program),
            _ => self.program.clone(),
        };
        let mut command = Command::new(path);
        crate::child_env::clean_env(&mut command, &self.inherit, &self.env);
        command
            .args(&self.args)
            .env("TOLLGATE_CALL_ID", ctx.call_id())
            .env("TOLLGATE_IDEMPOTENCY_KEY", ctx.idempotency_key())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        if let Some(dir) = &self.dir {
            command.current_dir(dir);
        }
        let mut child = command.spawn().map_err(io)?;
        let mut stdin = child.stdin.take().expect("stdin is piped");
        let stdout = child.stdout.take().expect("stdout is piped");
        let stderr = child.stderr.take().expect("stderr is piped");
        let input = args.to_string();
        let feed = async move {
            // A program that exits without reading its input is not an
            // error of ours: its status and output tell.
            let _ = stdin.write_all(input.as_bytes()).await;
            drop(stdin);
        };
        let read_out = async {
            let mut lines = BufReader::new(stdout).lines();
            let mut all = Vec::new();
            while let Some(line) = lines.next_line().await? {
                ctx.progress("stdout", &line);
                all.push(line);
            }
            Ok::<_, std::io::Error>(all)
        };
        let read_err = async {
            let mut lines = BufReader::new(stderr).lines();
            let mut all = String::new();
            while let Some(line) = lines.next_line().await? {
                ctx.progress("stderr", &line);
                all.push_str(&line);
                all.push('\n');
            }
            Ok::<_, std::io::Error>(all)
        };
        let ((), out, err, status) = tokio::join!(feed, read_out, read_err, child.wait());
        let (out, err, status) = (out.map_err(io)?, err.map_err(io)?, status.map_err(io)?);
        if !status.success() {
            let start = err.len().saturating_sub(STDERR_TAIL);
            let start = (start..err.len()).find(|&i| err.is_char_boundary(i)).unwrap_or(err.len());
            return Err(HarnessError::CommandFailed {
                program,
                status: status.code().unwrap_or(-1),
                stderr: err[start..].trim_end().to_owned(),
            });
        }
        parse_output(&out)
            .map_err(|message| HarnessError::CommandOutputInvalid { program, message })
    }
}

/// The whole output as JSON, else its last non-empty line.
fn parse_output(lines: &[String]) -> Result<Value, String> {
    let whole = lines.join("\n");
    match serde_json::from_str(&whole) {
        Ok(value) => Ok(value),
        Err(error) => {
            let last = lines.iter().rev().find(|line| !line.trim().is_empty());
            match last.map(|line| serde_json::from_str(line)) {
                Some(Ok(value)) => Ok(value),
                None => Err("the output is empty".to_owned()),
                Some(Err(_)) => Err(format!("{error} (output: {})", shorten(&whole, 200))),
            }
        }
    }
}

pub(crate) fn shorten(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        Some((end, _)) => format!("{}…", &text[..end]),
        None => text.to_owned(),
    }
}

#[async_trait]
impl Tool for CommandTool {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    async fn call(&self, args: Value, ctx: &ToolContext) -> Result<Value, HarnessError> {
        match tokio::time::timeout(self.timeout, self.run(args, ctx)).await {
            Ok(result) => result,
            Err(_) => Err(HarnessError::Timeout {
                what: format!("tool `{}`", self.spec.name),
                after: self.timeout,
            }),
        }
    }
}

#[cfg(all(test, unix))]
mod tests {
    use super::*;
    use serde_json::json;

    fn tool(script: &str) -> CommandTool {
        let spec = ToolSpec::new("t", "test", json!({"type": "object"}));
        CommandTool::new(spec, "/bin/sh", vec!["-c".into(), script.into()])
    }

    fn block_on<F: std::future::Future>(future: F) -> F::Output {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a runtime")
            .block_on(future)
    }

    #[test]
    fn arguments_go_in_on_stdin_and_the_last_json_line_comes_back() {
        let echo = tool("echo working; read line; echo \"{\\\"got\\\": $line}\"");
        let result = block_on(echo.call(json!({"id": 7}), &ToolContext::detached("c1")));
        assert_eq!(result.unwrap(), json!({"got": {"id": 7}}));
    }

    #[test]
    fn arguments_are_never_interpreted_by_a_shell() {
        // The argument text reaches the program as data, `$(...)` included.
        let cat = tool("cat");
        let args = json!({"name": "$(touch /tmp/tollgate-pwned) `id`; rm -rf /"});
        let result = block_on(cat.call(args.clone(), &ToolContext::detached("c2")));
        assert_eq!(result.unwrap(), args);
    }

    #[test]
    fn failures_are_typed() {
        let ctx = ToolContext::detached("c3");
        let failed = block_on(tool("echo boom >&2; exit 3").call(json!({}), &ctx)).unwrap_err();
        assert!(
            matches!(&failed, HarnessError::CommandFailed { status: 3, stderr, .. } if stderr == "boom"),
            "{failed}"
        );
        let garbage = block_on(tool("echo not json").call(json!({}), &ctx)).unwrap_err();
        assert!(matches!(garbage, HarnessError::CommandOutputInvalid { .. }), "{garbage}");
        let slow = tool("sleep 5").timeout(Duration::from_millis(100));
        let timed_out = block_on(slow.call(json!({}), &ctx)).unwrap_err();
        assert!(matches!(timed_out, HarnessError::Timeout { .. }), "{timed_out}");
        let missing =
            CommandTool::new(ToolSpec::new("m", "", json!({})), "/no/such/program", vec![]);
        let io = block_on(missing.call(json!({}), &ctx)).unwrap_err();
        assert!(matches!(io, HarnessError::CommandIo { .. }), "{io}");
    }
}
