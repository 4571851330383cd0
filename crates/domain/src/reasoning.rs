//! Reasoning in the content: many open reasoning models emit their thinking at the start of
//! `content` (`<think>…</think>answer`) when the server runs no reasoning parser. [`Splitter`]
//! takes the content as it streams, split at any byte (inside a tag, inside a UTF-8 character),
//! and classes every byte as reasoning, answer or delimiter (the tags, the whitespace before the
//! opening one and after the closing one), so the answer's first token, the reasoning token
//! count and the graded text are the answer's.
//!
//! Rules: only a tag at the very start (after whitespace) opens reasoning; the first closing
//! tag ends it and everything after is answer, tags included; no closing tag means everything
//! after the opening one is reasoning ([`Recognised::closed`] false says so). A candidate whose
//! server puts the opening tag in the prompt (the chat template's generation prompt, as
//! DeepSeek-R1's and Qwen3's do) is switched to [`ReasoningInContent::Always`]: its content is
//! reasoning from the first byte until a closing tag.
use serde::{Deserialize, Serialize};

/// The reasoning delimiters open models emit, each with its opening and closing tag.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Delimiter {
    /// `<think>…</think>`: DeepSeek-R1 and its distills, QwQ, Qwen3, GLM-4.5, MiniMax-M1, Phi-4-reasoning.
    Think,
    /// `<thinking>…</thinking>`: models prompted or tuned in Anthropic's style.
    Thinking,
    /// `<reasoning>…</reasoning>`.
    Reasoning,
    /// `[THINK]…[/THINK]`: Mistral's Magistral.
    BracketThink,
    /// `<seed:think>…</seed:think>`: ByteDance Seed-OSS.
    SeedThink,
    /// `◁think▷…◁/think▷`: Moonshot's Kimi-VL-Thinking.
    KimiThink,
    /// `<|begin_of_thought|>…<|end_of_thought|>`: Sky-T1, Bespoke-Stratos, OpenThoughts.
    Thought,
}

impl Delimiter {
    pub const ALL: [Delimiter; 7] = [
        Delimiter::Think,
        Delimiter::Thinking,
        Delimiter::Reasoning,
        Delimiter::BracketThink,
        Delimiter::SeedThink,
        Delimiter::KimiThink,
        Delimiter::Thought,
    ];

    pub fn open(&self) -> &'static str {
        match self {
            Delimiter::Think => "<think>",
            Delimiter::Thinking => "<thinking>",
            Delimiter::Reasoning => "<reasoning>",
            Delimiter::BracketThink => "[THINK]",
            Delimiter::SeedThink => "<seed:think>",
            Delimiter::KimiThink => "◁think▷",
            Delimiter::Thought => "<|begin_of_thought|>",
        }
    }

    pub fn close(&self) -> &'static str {
        match self {
            Delimiter::Think => "</think>",
            Delimiter::Thinking => "</thinking>",
            Delimiter::Reasoning => "</reasoning>",
            Delimiter::BracketThink => "[/THINK]",
            Delimiter::SeedThink => "</seed:think>",
            Delimiter::KimiThink => "◁/think▷",
            Delimiter::Thought => "<|end_of_thought|>",
        }
    }

    /// `<think>…</think>`, as pages show it.
    pub fn label(&self) -> String {
        format!("{}…{}", self.open(), self.close())
    }
}

/// A candidate's switch: where its server puts reasoning that has no field of its own.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ReasoningInContent {
    /// Content that opens with a known tag is reasoning up to its closing tag.
    #[default]
    Auto,
    /// The content is reasoning from its first byte up to a closing tag (an opening tag is
    /// optional): servers whose chat template puts `<think>` in the prompt.
    Always,
    /// The content is all answer, whatever it starts with.
    Never,
}

impl ReasoningInContent {
    pub const ALL: [ReasoningInContent; 3] = [
        ReasoningInContent::Auto,
        ReasoningInContent::Always,
        ReasoningInContent::Never,
    ];

    pub fn as_str(&self) -> &'static str {
        match self {
            ReasoningInContent::Auto => "auto",
            ReasoningInContent::Always => "always",
            ReasoningInContent::Never => "never",
        }
    }

    pub fn label(&self) -> &'static str {
        match self {
            ReasoningInContent::Auto => "auto-detect a reasoning tag at the start of the content",
            ReasoningInContent::Always => "always: the content is reasoning up to a closing tag",
            ReasoningInContent::Never => "never: the content is all answer",
        }
    }

    /// The switch named `s` (blank: the default, auto).
    pub fn parse(s: &str) -> Option<ReasoningInContent> {
        match s.trim() {
            "" => Some(ReasoningInContent::Auto),
            s => ReasoningInContent::ALL.into_iter().find(|m| m.as_str() == s),
        }
    }
}

/// What a record's content held: kept on the record and shown on its case page.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Recognised {
    /// The tag pair found (None: the switch said reasoning and no tag came at all).
    pub delimiter: Option<Delimiter>,
    /// An opening tag started the content (false: reasoning from the start, by the switch).
    pub opened: bool,
    /// A closing tag ended the reasoning (false: the content is all reasoning).
    pub closed: bool,
}

impl Recognised {
    /// `<think>…</think> at the start of the content`, `… never closed: all of it is reasoning`.
    pub fn describe(&self) -> String {
        let tags = match (self.delimiter, self.opened) {
            (Some(d), true) => format!("{} at the start of the content", d.label()),
            (Some(d), false) => format!(
                "reasoning from the first byte (switch: always), closed by {}",
                d.close()
            ),
            (None, _) => "reasoning from the first byte (switch: always)".to_string(),
        };
        if self.closed {
            tags
        } else {
            format!("{tags}; never closed, so all of the content is reasoning")
        }
    }
}

/// What one byte of the content is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Class {
    Reasoning,
    Answer,
    /// A tag, or the whitespace before the opening one or after the closing one.
    Delimiter,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Nothing decided: `held` is leading whitespace and a prefix of an opening tag.
    Start,
    /// Inside the reasoning; `held` is a prefix of a closing tag. `close` is the opening tag's
    /// pair (None: any closing tag, under the `Always` switch without an opening tag).
    Inside {
        close: Option<Delimiter>,
    },
    /// Just after the closing tag: whitespace is still the delimiter's.
    AfterClose,
    Answer,
}

/// Most leading whitespace held back while waiting for an opening tag.
const MAX_LEADING_WHITESPACE: usize = 1024;

/// Classes a content stream's bytes as they come; see the module comment.
#[derive(Debug, Clone)]
pub struct Splitter {
    mode: ReasoningInContent,
    state: State,
    held: Vec<u8>,
    recognised: Option<Recognised>,
}

/// The text one call decided, by class.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Pieces {
    pub reasoning: String,
    pub answer: String,
    /// Bytes of delimiter decided (they belong to neither text).
    pub delimiter_bytes: usize,
}

impl Splitter {
    pub fn new(mode: ReasoningInContent) -> Self {
        Splitter {
            mode,
            state: if mode == ReasoningInContent::Never {
                State::Answer
            } else {
                State::Start
            },
            held: Vec::new(),
            recognised: None,
        }
    }

    /// What was recognised so far (None: the content is answer, or nothing is decided yet).
    pub fn recognised(&self) -> Option<Recognised> {
        self.recognised
    }

    /// Whether the content's start is still undecided (no tag recognised or refused yet).
    pub fn undecided(&self) -> bool {
        self.state == State::Start
    }

    /// Whether everything from here on is answer: nothing is held and nothing will be.
    pub fn passing_through(&self) -> bool {
        self.state == State::Answer && self.held.is_empty()
    }

    /// Feeds the next bytes; `emit` gets every decided span in order with its class.
    pub fn feed_bytes(&mut self, bytes: &[u8], emit: &mut dyn FnMut(Class, &[u8])) {
        if self.state == State::Answer {
            if !bytes.is_empty() {
                emit(Class::Answer, bytes);
            }
            return;
        }
        for &b in bytes {
            self.push(b, emit);
        }
    }

    /// The end of the content: whatever is still held is decided.
    pub fn finish_bytes(&mut self, emit: &mut dyn FnMut(Class, &[u8])) {
        let held = std::mem::take(&mut self.held);
        match self.state {
            State::Start if self.mode == ReasoningInContent::Always && !held.is_empty() => {
                self.enter(None, false);
                self.emit_held(Class::Reasoning, held, emit);
            }
            State::Start => self.emit_held(Class::Answer, held, emit),
            State::Inside { .. } => self.emit_held(Class::Reasoning, held, emit),
            State::AfterClose | State::Answer => {}
        }
    }

    /// [`Splitter::feed_bytes`] for text: whole strings in give whole strings out.
    pub fn feed(&mut self, text: &str) -> Pieces {
        let mut pieces = Pieces::default();
        let mut bytes = Collected::default();
        self.feed_bytes(text.as_bytes(), &mut |c, b| bytes.add(c, b));
        bytes.into_pieces(&mut pieces);
        pieces
    }

    /// [`Splitter::finish_bytes`] for text.
    pub fn finish(&mut self) -> Pieces {
        let mut pieces = Pieces::default();
        let mut bytes = Collected::default();
        self.finish_bytes(&mut |c, b| bytes.add(c, b));
        bytes.into_pieces(&mut pieces);
        pieces
    }

    fn emit_held(&mut self, class: Class, held: Vec<u8>, emit: &mut dyn FnMut(Class, &[u8])) {
        if !held.is_empty() {
            emit(class, &held);
        }
    }

    fn enter(&mut self, delimiter: Option<Delimiter>, opened: bool) {
        self.state = State::Inside { close: delimiter };
        self.recognised = Some(Recognised {
            delimiter,
            opened,
            closed: false,
        });
    }

    fn push(&mut self, b: u8, emit: &mut dyn FnMut(Class, &[u8])) {
        match self.state {
            State::Answer => emit(Class::Answer, &[b]),
            State::AfterClose => {
                if b.is_ascii_whitespace() {
                    emit(Class::Delimiter, &[b]);
                } else {
                    self.state = State::Answer;
                    emit(Class::Answer, &[b]);
                }
            }
            State::Start => {
                self.held.push(b);
                let ws = self.held.iter().take_while(|c| c.is_ascii_whitespace()).count();
                let tag = &self.held[ws..];
                if tag.is_empty() {
                    if ws <= MAX_LEADING_WHITESPACE {
                        return;
                    }
                } else if let Some(d) = Delimiter::ALL.into_iter().find(|d| d.open().as_bytes() == tag) {
                    let held = std::mem::take(&mut self.held);
                    self.enter(Some(d), true);
                    self.emit_held(Class::Delimiter, held, emit);
                    return;
                } else if Delimiter::ALL.iter().any(|d| d.open().as_bytes().starts_with(tag)) {
                    return;
                }
                // No opening tag: the switch decides what the content is, held bytes included.
                let held = std::mem::take(&mut self.held);
                if self.mode == ReasoningInContent::Always {
                    self.enter(None, false);
                    for b in held {
                        self.push(b, emit);
                    }
                } else {
                    self.state = State::Answer;
                    self.emit_held(Class::Answer, held, emit);
                }
            }
            State::Inside { close } => {
                self.held.push(b);
                let closes = |d: &Delimiter| close.is_none_or(|c| c == *d);
                if let Some(d) = Delimiter::ALL
                    .into_iter()
                    .filter(closes)
                    .find(|d| d.close().as_bytes() == self.held.as_slice())
                {
                    let held = std::mem::take(&mut self.held);
                    self.state = State::AfterClose;
                    self.recognised = self.recognised.map(|r| Recognised {
                        delimiter: Some(d),
                        closed: true,
                        ..r
                    });
                    self.emit_held(Class::Delimiter, held, emit);
                    return;
                }
                // Bytes that can no longer start a closing tag are reasoning; the rest may.
                let mut start = 0;
                while start < self.held.len() {
                    let rest = &self.held[start..];
                    if Delimiter::ALL
                        .iter()
                        .filter(|d| closes(d))
                        .any(|d| d.close().as_bytes().starts_with(rest))
                    {
                        break;
                    }
                    start += 1;
                }
                if start > 0 {
                    let rest = self.held.split_off(start);
                    let done = std::mem::replace(&mut self.held, rest);
                    emit(Class::Reasoning, &done);
                }
            }
        }
    }
}

/// Spans gathered by class, turned into text at the end of a call.
#[derive(Default)]
struct Collected {
    reasoning: Vec<u8>,
    answer: Vec<u8>,
    delimiter: usize,
}

impl Collected {
    fn add(&mut self, class: Class, bytes: &[u8]) {
        match class {
            Class::Reasoning => self.reasoning.extend_from_slice(bytes),
            Class::Answer => self.answer.extend_from_slice(bytes),
            Class::Delimiter => self.delimiter += bytes.len(),
        }
    }

    /// Whole strings fed give whole strings back (a span ends only where a tag may start, which
    /// is a character boundary); anything else is decoded lossily rather than dropped.
    fn into_pieces(self, pieces: &mut Pieces) {
        let text =
            |b: Vec<u8>| String::from_utf8(b).unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned());
        pieces.reasoning = text(self.reasoning);
        pieces.answer = text(self.answer);
        pieces.delimiter_bytes = self.delimiter;
    }
}

/// The whole content split at once: (reasoning, answer, what was recognised).
pub fn split(mode: ReasoningInContent, content: &str) -> (String, String, Option<Recognised>) {
    let mut s = Splitter::new(mode);
    let mut a = s.feed(content);
    let b = s.finish();
    a.reasoning.push_str(&b.reasoning);
    a.answer.push_str(&b.answer);
    (a.reasoning, a.answer, s.recognised())
}

#[cfg(test)]
mod tests {
    use super::*;
    use Class::{Answer as A, Delimiter as D, Reasoning as R};

    /// The expected class of every byte of the concatenated segments.
    fn expected(segments: &[(Class, &str)]) -> (String, Vec<Class>) {
        let mut text = String::new();
        let mut classes = Vec::new();
        for (c, s) in segments {
            text.push_str(s);
            classes.extend(std::iter::repeat_n(*c, s.len()));
        }
        (text, classes)
    }

    /// The classes given to `text`'s bytes when fed in pieces cut at `cuts`.
    fn classify(mode: ReasoningInContent, text: &[u8], cuts: &[usize]) -> (Vec<Class>, Option<Recognised>) {
        let mut s = Splitter::new(mode);
        let mut out = Vec::new();
        let mut push = |c: Class, b: &[u8]| out.extend(std::iter::repeat_n(c, b.len()));
        let mut at = 0;
        for &cut in cuts.iter().chain([text.len()].iter()) {
            s.feed_bytes(&text[at..cut], &mut push);
            at = cut;
        }
        s.finish_bytes(&mut push);
        (out, s.recognised())
    }

    struct Trap {
        name: &'static str,
        mode: ReasoningInContent,
        segments: &'static [(Class, &'static str)],
        recognised: Option<Recognised>,
    }

    const fn seen(delimiter: Delimiter, opened: bool, closed: bool) -> Option<Recognised> {
        Some(Recognised {
            delimiter: Some(delimiter),
            opened,
            closed,
        })
    }

    use ReasoningInContent::{Always, Auto, Never};

    const TRAPS: &[Trap] = &[
        Trap {
            name: "think then answer",
            mode: Auto,
            segments: &[(D, "<think>"), (R, "Let me see: 2+2."), (D, "</think>\n\n"), (A, "4")],
            recognised: seen(Delimiter::Think, true, true),
        },
        Trap {
            name: "leading whitespace before the tag",
            mode: Auto,
            segments: &[(D, " \n\t<think>"), (R, "hm"), (D, "</think>"), (A, "yes")],
            recognised: seen(Delimiter::Think, true, true),
        },
        Trap {
            name: "nested angle brackets in the reasoning and the answer",
            mode: Auto,
            segments: &[
                (D, "<think>"),
                (R, "is <b> a tag? if a<b and </thin k> no"),
                (D, "</think>"),
                (A, "<b>bold</b> a <think>x</think> and </think> stay answer"),
            ],
            recognised: seen(Delimiter::Think, true, true),
        },
        Trap {
            name: "no closing tag: all reasoning",
            mode: Auto,
            segments: &[(D, "<think>"), (R, "thinking forever </thin")],
            recognised: seen(Delimiter::Think, true, false),
        },
        Trap {
            name: "tag not at the start is answer",
            mode: Auto,
            segments: &[(A, "Sure. <think>not reasoning</think> done")],
            recognised: None,
        },
        Trap {
            name: "empty think",
            mode: Auto,
            segments: &[(D, "<think>"), (D, "</think>\n\n"), (A, "answer")],
            recognised: seen(Delimiter::Think, true, true),
        },
        Trap {
            name: "UTF-8 in the reasoning and the answer, Kimi's tags",
            mode: Auto,
            segments: &[
                (D, "◁think▷"),
                (R, "想一想 ◁ ▷ é"),
                (D, "◁/think▷"),
                (A, "答案是 ◁/think▷ 4"),
            ],
            recognised: seen(Delimiter::KimiThink, true, true),
        },
        Trap {
            name: "<thinking> is not <think>",
            mode: Auto,
            segments: &[
                (D, "<thinking>"),
                (R, "a </think> inside"),
                (D, "</thinking>"),
                (A, "ok"),
            ],
            recognised: seen(Delimiter::Thinking, true, true),
        },
        Trap {
            name: "Magistral",
            mode: Auto,
            segments: &[(D, "[THINK]"), (R, "[x]"), (D, "[/THINK]"), (A, "Paris")],
            recognised: seen(Delimiter::BracketThink, true, true),
        },
        Trap {
            name: "Seed-OSS",
            mode: Auto,
            segments: &[(D, "<seed:think>"), (R, "r"), (D, "</seed:think>"), (A, "a")],
            recognised: seen(Delimiter::SeedThink, true, true),
        },
        Trap {
            name: "Sky-T1 thought",
            mode: Auto,
            segments: &[
                (D, "<|begin_of_thought|>"),
                (R, "step <|end_of"),
                (D, "<|end_of_thought|>\n\n"),
                (A, "<|begin_of_solution|>7<|end_of_solution|>"),
            ],
            recognised: seen(Delimiter::Thought, true, true),
        },
        Trap {
            name: "<reasoning>",
            mode: Auto,
            segments: &[(D, "<reasoning>"), (R, "r"), (D, "</reasoning>"), (A, "a")],
            recognised: seen(Delimiter::Reasoning, true, true),
        },
        Trap {
            name: "a tag's prefix that is not a tag is answer",
            mode: Auto,
            segments: &[(A, "<thinker> is a noun")],
            recognised: None,
        },
        Trap {
            name: "content that is only the start of a tag is answer",
            mode: Auto,
            segments: &[(A, "  <thin")],
            recognised: None,
        },
        Trap {
            name: "always: no opening tag, reasoning up to the close (DeepSeek-R1 template)",
            mode: Always,
            segments: &[(R, "\nOkay, so </thi"), (D, "</think>\n\n"), (A, "The answer")],
            recognised: seen(Delimiter::Think, false, true),
        },
        Trap {
            name: "always: an opening tag is still taken",
            mode: Always,
            segments: &[(D, "<think>"), (R, "r"), (D, "</think>"), (A, "a")],
            recognised: seen(Delimiter::Think, true, true),
        },
        Trap {
            name: "always: a closing tag straight away",
            mode: Always,
            segments: &[(D, "</think>"), (A, "a")],
            recognised: seen(Delimiter::Think, false, true),
        },
        Trap {
            name: "always: never closed",
            mode: Always,
            segments: &[(R, "just text")],
            recognised: Some(Recognised {
                delimiter: None,
                opened: false,
                closed: false,
            }),
        },
        Trap {
            name: "never: the tag is answer",
            mode: Never,
            segments: &[(A, "<think>r</think>a")],
            recognised: None,
        },
    ];

    /// Every trap, fed whole, cut once at every byte offset, and cut at every byte.
    #[test]
    fn the_trap_set_is_classified_exactly_at_every_split() {
        for trap in TRAPS {
            let (text, want) = expected(trap.segments);
            let bytes = text.as_bytes();
            let mut splits: Vec<Vec<usize>> = vec![vec![], (1..bytes.len()).collect()];
            splits.extend((1..bytes.len()).map(|i| vec![i]));
            for cuts in &splits {
                let (got, recognised) = classify(trap.mode, bytes, cuts);
                assert_eq!(got, want, "{}: cut at {cuts:?}", trap.name);
                assert_eq!(recognised, trap.recognised, "{}: cut at {cuts:?}", trap.name);
            }
        }
    }

    #[test]
    fn text_pieces_follow_the_classes() {
        let (r, a, rec) = split(Auto, "<think>\nhm é\n</think>\n\nOui");
        assert_eq!((r.as_str(), a.as_str()), ("\nhm é\n", "Oui"));
        assert!(rec.unwrap().closed);
        let mut s = Splitter::new(Auto);
        let p = s.feed("<th");
        assert_eq!(p, Pieces::default());
        let p = s.feed("ink>abc</");
        assert_eq!(
            (p.reasoning.as_str(), p.answer.as_str(), p.delimiter_bytes),
            ("abc", "", 7)
        );
        let p = s.feed("think>x");
        assert_eq!((p.answer.as_str(), p.delimiter_bytes), ("x", 8));
        assert!(s.passing_through());
        assert_eq!(s.finish(), Pieces::default());
    }

    #[test]
    fn the_switch_parses_and_describes() {
        assert_eq!(ReasoningInContent::parse(""), Some(Auto));
        assert_eq!(ReasoningInContent::parse("always"), Some(Always));
        assert_eq!(ReasoningInContent::parse("sometimes"), None);
        let r = seen(Delimiter::Think, true, false).unwrap();
        assert!(r.describe().contains("never closed"), "{}", r.describe());
    }
}
