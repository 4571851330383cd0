//! A server-sent-events parser that takes bytes exactly as they come off the network.
//!
//! Follows the WHATWG event-stream rules: lines end in `\n`, `\r\n` or `\r` (a `\r\n` split
//! across two reads is one line end); `:` starts a comment (keep-alives such as `: ping`);
//! several `data:` lines join with `\n`; a blank line dispatches the event; an event without
//! data is dropped. Unlike a browser it also dispatches a last event that the server did not
//! terminate with a blank line (`finish`), because some servers end with `data: [DONE]\n`.

/// Longest line accepted; a server that never sends a line end cannot exhaust memory.
pub const MAX_LINE_BYTES: usize = 8 * 1024 * 1024;

/// One dispatched event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SseEvent {
    /// The `event:` field, when given (Anthropic names every event; OpenAI never does).
    pub event: Option<String>,
    pub data: String,
}

/// A line longer than [`MAX_LINE_BYTES`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("event-stream line longer than {MAX_LINE_BYTES} bytes")]
pub struct LineTooLong;

/// Incremental parser: feed reads with [`SseParser::push`], then call [`SseParser::finish`].
#[derive(Debug, Default)]
pub struct SseParser {
    /// Bytes of the current, unfinished line.
    line: Vec<u8>,
    /// The previous read ended in `\r`: a leading `\n` in the next read belongs to it.
    after_cr: bool,
    /// Nothing parsed yet (a leading byte-order mark is skipped).
    at_start: bool,
    event: Option<String>,
    data: String,
    has_data: bool,
    /// Data buffers of events already handled, given back with [`SseParser::recycle`]: the
    /// next events' data is written into them, so a stream allocates no buffer per event.
    spare: Vec<String>,
}

/// Spare buffers kept: more than the events one read usually completes is never needed.
const MAX_SPARE_BUFFERS: usize = 16;

impl SseParser {
    pub fn new() -> Self {
        SseParser {
            at_start: true,
            ..Default::default()
        }
    }

    /// Parses one network read; returns the events it completed, in order.
    pub fn push(&mut self, bytes: &[u8]) -> Result<Vec<SseEvent>, LineTooLong> {
        let mut out = Vec::new();
        self.push_into(bytes, &mut out)?;
        Ok(out)
    }

    /// Like [`SseParser::push`], appending to `out` (a caller reusing one vector saves an
    /// allocation per read on the hot path).
    pub fn push_into(&mut self, mut bytes: &[u8], out: &mut Vec<SseEvent>) -> Result<(), LineTooLong> {
        if self.after_cr {
            self.after_cr = false;
            if let Some(rest) = bytes.strip_prefix(b"\n") {
                bytes = rest;
            }
        }
        while let Some(end) = bytes.iter().position(|&b| b == b'\n' || b == b'\r') {
            if self.line.is_empty() {
                // The whole line is in this read: parse it in place, without copying.
                if end > MAX_LINE_BYTES {
                    return Err(LineTooLong);
                }
                self.process_line(&bytes[..end], out);
            } else {
                self.line.extend_from_slice(&bytes[..end]);
                self.check_len()?;
                // Taken and given back, so the buffer keeps its capacity across lines.
                let mut line = std::mem::take(&mut self.line);
                self.process_line(&line, out);
                line.clear();
                self.line = line;
            }
            let is_cr = bytes[end] == b'\r';
            bytes = &bytes[end + 1..];
            if is_cr {
                match bytes.first() {
                    Some(b'\n') => bytes = &bytes[1..],
                    Some(_) => {}
                    None => self.after_cr = true,
                }
            }
        }
        self.line.extend_from_slice(bytes);
        self.check_len()
    }

    /// Gives a handled event's data buffer back for the next events (see `spare`).
    pub fn recycle(&mut self, mut data: String) {
        if self.spare.len() < MAX_SPARE_BUFFERS {
            data.clear();
            self.spare.push(data);
        }
    }

    /// The stream ended: returns an event still pending without its closing blank line.
    pub fn finish(&mut self) -> Option<SseEvent> {
        let mut out = Vec::new();
        if !self.line.is_empty() {
            let line = std::mem::take(&mut self.line);
            self.process_line(&line, &mut out);
        }
        self.dispatch(&mut out);
        out.pop()
    }

    fn check_len(&self) -> Result<(), LineTooLong> {
        if self.line.len() > MAX_LINE_BYTES {
            Err(LineTooLong)
        } else {
            Ok(())
        }
    }

    fn process_line(&mut self, raw: &[u8], out: &mut Vec<SseEvent>) {
        let mut raw = raw;
        if std::mem::take(&mut self.at_start)
            && let Some(rest) = raw.strip_prefix("\u{feff}".as_bytes())
        {
            raw = rest;
        }
        if raw.is_empty() {
            self.dispatch(out);
            return;
        }
        if raw[0] == b':' {
            return; // comment / keep-alive
        }
        let line = String::from_utf8_lossy(raw);
        let (field, value) = match line.find(':') {
            Some(i) => {
                let value = &line[i + 1..];
                (&line[..i], value.strip_prefix(' ').unwrap_or(value))
            }
            None => (line.as_ref(), ""),
        };
        match field {
            "data" => {
                if self.has_data {
                    self.data.push('\n');
                }
                self.data.push_str(value);
                self.has_data = true;
            }
            "event" => self.event = Some(value.to_string()),
            // `id` and `retry` matter only to reconnecting browsers; unknown fields are ignored.
            _ => {}
        }
    }

    fn dispatch(&mut self, out: &mut Vec<SseEvent>) {
        let event = self.event.take();
        if std::mem::take(&mut self.has_data) {
            let next = self.spare.pop().unwrap_or_default();
            out.push(SseEvent {
                event: event.filter(|e| !e.is_empty()),
                data: std::mem::replace(&mut self.data, next),
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn data(d: &str) -> SseEvent {
        SseEvent {
            event: None,
            data: d.into(),
        }
    }

    fn parse_in_pieces(input: &[u8], piece: usize) -> Vec<SseEvent> {
        let mut p = SseParser::new();
        let mut out = Vec::new();
        for chunk in input.chunks(piece) {
            out.extend(p.push(chunk).unwrap());
        }
        out.extend(p.finish());
        out
    }

    #[test]
    fn events_split_at_every_byte_boundary_parse_the_same() {
        let input = "data: {\"a\":1}\r\n\r\n: ping\r\n\r\nevent: message_stop\r\ndata: {\"b\":\"一二\"}\r\n\r\ndata: [DONE]\r\n\r\n";
        let expected = vec![
            data("{\"a\":1}"),
            SseEvent {
                event: Some("message_stop".into()),
                data: "{\"b\":\"一二\"}".into(),
            },
            data("[DONE]"),
        ];
        for piece in 1..=input.len() {
            assert_eq!(parse_in_pieces(input.as_bytes(), piece), expected, "piece size {piece}");
        }
    }

    #[test]
    fn multi_line_data_joins_with_newline() {
        let events = parse_in_pieces(b"data: first\ndata:second\ndata:  third\n\n", 1000);
        assert_eq!(events, vec![data("first\nsecond\n third")]);
    }

    #[test]
    fn lone_cr_lf_and_crlf_all_end_lines() {
        let events = parse_in_pieces(b"data: a\r\rdata: b\n\ndata: c\r\n\r\n", 1000);
        assert_eq!(events, vec![data("a"), data("b"), data("c")]);
        // a CR at the end of one read followed by LF at the start of the next is one line end
        let mut p = SseParser::new();
        assert!(p.push(b"data: x\r").unwrap().is_empty());
        assert!(p.push(b"\n").unwrap().is_empty());
        assert_eq!(p.push(b"\r\n").unwrap(), vec![data("x")]);
    }

    #[test]
    fn comments_and_events_without_data_are_not_dispatched() {
        let events = parse_in_pieces(
            b": keep-alive\n\nevent: ping\n\nid: 7\nretry: 10\n\n:\n\ndata: y\n\n",
            1000,
        );
        assert_eq!(events, vec![data("y")]);
    }

    #[test]
    fn several_events_in_one_read_and_a_trailing_unterminated_event() {
        let mut p = SseParser::new();
        let events = p.push(b"data: 1\n\ndata: 2\n\ndata: 3\n\ndata: [DONE]\n").unwrap();
        assert_eq!(events, vec![data("1"), data("2"), data("3")]);
        assert_eq!(p.finish(), Some(data("[DONE]")));
        assert_eq!(p.finish(), None);
    }

    #[test]
    fn byte_order_mark_and_field_without_colon() {
        let events = parse_in_pieces("\u{feff}data: a\n\ndata\n\n".as_bytes(), 2);
        assert_eq!(events, vec![data("a"), data("")]);
    }

    #[test]
    fn recycled_buffers_carry_the_next_events_without_their_old_data() {
        let mut p = SseParser::new();
        let first = p.push(b"data: a long first event\n\n").unwrap();
        let buffer = first.into_iter().next().unwrap().data;
        let capacity = buffer.capacity();
        p.recycle(buffer);
        let second = p.push(b"data: b\n\ndata: c\n\n").unwrap();
        assert_eq!(second, vec![data("b"), data("c")]);
        // The buffer went to the event after the one being filled when it came back.
        assert_eq!(second[1].data.capacity(), capacity);
    }

    #[test]
    fn an_endless_line_is_refused() {
        let mut p = SseParser::new();
        let big = vec![b'x'; MAX_LINE_BYTES / 2 + 1];
        assert!(p.push(&big).is_ok());
        assert_eq!(p.push(&big), Err(LineTooLong));
    }
}
