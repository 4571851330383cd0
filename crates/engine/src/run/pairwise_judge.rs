//! The LLM judge in blind pairwise mode (issue 50): one comparison sent to a judge candidate,
//! the reply read into a choice (`domain::review::pairwise`). A comparison is made after a run,
//! on its stored answers, so it measures nothing and is not recorded as a request of the run;
//! the choice is stored as a preference whose picker names the judge.
use crate::domain::candidate::Candidate;
use crate::domain::evalset::{ChatMessage, EvalCase, EvalSetFile};
use crate::domain::review::pairwise::{Choice, parse_preference};
use crate::domain::run::RunConfig;
use crate::error::EngineError;
use crate::wire::client::{CandidateClient, Timeouts};
use crate::wire::protocol::RequestParams;
use crate::wire::provider::prepare;

/// A judge's reply to a comparison is a few sentences and a preference line.
const PAIRWISE_MAX_TOKENS: u32 = 512;

/// A client for one judge, reused across the comparisons of a batch.
pub struct PairwiseJudge {
    candidate: Candidate,
    client: CandidateClient,
}

impl PairwiseJudge {
    pub fn new(candidate: Candidate, config: &RunConfig) -> Result<Self, EngineError> {
        let client =
            CandidateClient::new(&candidate.spec, 1, Timeouts::for_run(config)).map_err(|e| EngineError::Client {
                candidate: candidate.spec.name.clone(),
                message: e.to_string(),
            })?;
        Ok(PairwiseJudge { candidate, client })
    }

    pub fn name(&self) -> &str {
        &self.candidate.spec.name
    }

    /// Sends `prompt` (`pairwise_prompt`) and reads the choice: Ok(None) when the judge
    /// answered without a preference line, Err(why) when the call failed.
    pub async fn compare(&self, file: &EvalSetFile, case_id: &str, prompt: String) -> Result<Option<Choice>, String> {
        let case = EvalCase {
            id: case_id.to_string(),
            vars: Default::default(),
            messages: Some(vec![ChatMessage {
                role: "user".into(),
                content: prompt,
            }]),
            ..Default::default()
        };
        let params = RequestParams {
            max_tokens: Some(self.candidate.spec.max_tokens.unwrap_or(PAIRWISE_MAX_TOKENS)),
            // The same pair should get the same verdict: only the order may change it.
            temperature: Some(0.0),
            stream: false,
        };
        let request = prepare(&self.candidate.spec, self.client.api_key(), file, &case, &params)
            .map_err(|f| format!("{}: {}", f.class.as_str(), f.detail))?;
        let exchange = self.client.send(&request, 0).await;
        match exchange.failure {
            Some(f) => Err(format!("{}: {}", f.class.as_str(), f.detail)),
            None => Ok(parse_preference(&exchange.output)),
        }
    }
}
