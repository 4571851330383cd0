//! Counting output tokens off the hot path: `tokenizer` (the canonical o200k count every
//! output gets) and `server_tokenizer` (a candidate's own tokenize endpoint, after its load).
pub mod o200k;
pub mod server_tokenizer;
pub mod tokenizer;
