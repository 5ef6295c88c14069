//! The answers hyper gives on its own, as JSON. A request whose head does
//! not parse (a target over hyper's limit: 414; more than 100 headers or a
//! head larger than its buffer: 431; conflicting `Content-Length`s: 400)
//! never reaches the router: hyper writes a bare status line with
//! `content-length: 0` and closes. [`JsonParseErrors`] sits between hyper
//! and the socket and writes those answers with the API's error body
//! instead, so that every error the server sends is the documented shape.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use serde_json::json;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// A connection whose automatic error answers are rewritten as JSON.
#[derive(Debug)]
pub(crate) struct JsonParseErrors<T> {
    inner: T,
    /// A rewritten answer not yet written to `inner`.
    pending: Vec<u8>,
}

impl<T> JsonParseErrors<T> {
    pub(crate) fn new(inner: T) -> Self {
        Self { inner, pending: Vec::new() }
    }
}

/// The JSON answer standing in for hyper's bare `head`, when `head` is one
/// of its automatic answers.
fn rewritten(head: &[u8]) -> Option<Vec<u8>> {
    let end = head.windows(4).position(|window| window == b"\r\n\r\n")?;
    if end + 4 != head.len() {
        return None;
    }
    let text = std::str::from_utf8(&head[..end]).ok()?;
    let mut lines = text.split("\r\n");
    let status_line = lines.next()?;
    let status = status_line.strip_prefix("HTTP/1.1 ")?.get(..3)?;
    let (kind, message) = match status {
        "400" => ("invalid", "the request's head is malformed (a bad line, header or length)"),
        "414" => ("uri_too_long", "the request target is too long"),
        "431" => ("headers_too_large", "the request has too many headers, or too large ones"),
        _ => return None,
    };
    // Ours always have a body; hyper's have none.
    if !lines.any(|line| line.eq_ignore_ascii_case("content-length: 0")) {
        return None;
    }
    let body = json!({"error": {"kind": kind, "message": message}}).to_string();
    Some(
        format!(
            "{status_line}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
            body.len()
        )
        .into_bytes(),
    )
}

impl<T: AsyncWrite + Unpin> JsonParseErrors<T> {
    /// Writes what is pending; ready once nothing is.
    fn drain(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while !self.pending.is_empty() {
            let written = match Pin::new(&mut self.inner).poll_write(cx, &self.pending) {
                Poll::Ready(Ok(0)) => return Poll::Ready(Err(io::ErrorKind::WriteZero.into())),
                Poll::Ready(Ok(written)) => written,
                Poll::Ready(Err(error)) => return Poll::Ready(Err(error)),
                Poll::Pending => return Poll::Pending,
            };
            self.pending.drain(..written);
        }
        Poll::Ready(Ok(()))
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for JsonParseErrors<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for JsonParseErrors<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = &mut *self;
        if this.drain(cx)?.is_pending() {
            return Poll::Pending;
        }
        if buf.starts_with(b"HTTP/1.1 4") {
            if let Some(answer) = rewritten(buf) {
                this.pending = answer;
                // Taken whole: the rest is written by later polls.
                let _ = this.drain(cx)?;
                return Poll::Ready(Ok(buf.len()));
            }
        }
        Pin::new(&mut this.inner).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = &mut *self;
        if this.drain(cx)?.is_pending() {
            return Poll::Pending;
        }
        Pin::new(&mut this.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = &mut *self;
        if this.drain(cx)?.is_pending() {
            return Poll::Pending;
        }
        Pin::new(&mut this.inner).poll_shutdown(cx)
    }

    // Hyper then hands each head over in one buffer.
    fn is_write_vectored(&self) -> bool {
        false
    }
}

#[cfg(test)]
mod tests {
    use super::rewritten;

    #[test]
    fn only_bare_automatic_answers_are_rewritten() {
        let bare =
            b"HTTP/1.1 431 Request Header Fields Too Large\r\ncontent-length: 0\r\ndate: x\r\n\r\n";
        let answer = String::from_utf8(rewritten(bare).expect("rewritten")).expect("text");
        assert!(answer.starts_with("HTTP/1.1 431 "), "{answer}");
        let body = answer.split("\r\n\r\n").nth(1).expect("body");
        let body: serde_json::Value = serde_json::from_str(body).expect("JSON");
        assert_eq!(body["error"]["kind"], "headers_too_large");
        let ours = b"HTTP/1.1 400 Bad Request\r\ncontent-length: 52\r\n\r\n";
        assert!(rewritten(ours).is_none(), "an answer with a body is ours");
        let other = b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\n\r\n";
        assert!(rewritten(other).is_none());
        let with_body = b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\n\r\nextra";
        assert!(rewritten(with_body).is_none());
    }
}
