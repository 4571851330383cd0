//! Whether abandoning streams frees the server's capacity: a baseline, streams dropped after
//! their first token, then one more request that must not be much slower.
use std::time::Duration;

use super::prober::{Prober, ms, result};
use crate::domain::operability::{ProbeKind, ProbeOutcome, ProbeResult};

impl Prober<'_> {
    /// Baseline, then streams abandoned after their first token, then one more request: it
    /// must not be much slower than the baseline.
    pub(super) async fn cancel_frees_capacity(&mut self) -> ProbeResult {
        let kind = ProbeKind::CancelFreesCapacity;
        let small = match self.completion("Say hello.", 8, true) {
            Ok(r) => r,
            Err(e) => return self.unbuildable(kind, e),
        };
        let long = match self.completion(
            "Write a very long essay about the history of lighthouses.",
            self.options.abandoned_max_tokens,
            true,
        ) {
            Ok(r) => r,
            Err(e) => return self.unbuildable(kind, e),
        };
        // Two idle requests, allowing one sporadic failure (a 500 says nothing about capacity).
        let mut baseline = Duration::ZERO;
        let (mut good, mut last_failure) = (0, None);
        for _ in 0..3 {
            let f = self.send(&small).await;
            if f.ok() {
                baseline = baseline.max(f.elapsed);
                good += 1;
                if good == 2 {
                    break;
                }
            } else {
                last_failure = Some(f);
            }
        }
        if good < 2 {
            let f = last_failure.unwrap_or_default();
            return result(
                kind,
                ProbeOutcome::Fail,
                format!("the baseline request failed: {}", f.describe()),
                f.evidence(self.key.as_ref()),
            );
        }
        // Open the streams together; each is dropped once its first token arrives, and any still
        // waiting (queued) when a third of the probe's time is up is dropped too.
        let give_up = self.options.timeout / 3;
        let mut opened = Vec::new();
        for _ in 0..self.options.cancel_streams.max(1) {
            let mut probe = Prober {
                spec: self.spec,
                options: self.options,
                key: self.key.clone(),
                http: self.http.clone(),
                root: self.root.clone(),
                base: self.base.clone(),
                provenance: Vec::new(),
            };
            let req = long.clone();
            opened.push(async move {
                tokio::time::timeout(
                    give_up,
                    probe.exchange(
                        reqwest::Method::POST,
                        &req.url,
                        req.headers.clone(),
                        Some(req.body.clone()),
                        true,
                        true,
                    ),
                )
                .await
                .ok()
            });
        }
        let abandoned = futures_util::future::join_all(opened).await;
        let started = abandoned.iter().flatten().filter(|f| f.first_token.is_some()).count();
        let mut after = self.send(&small).await;
        if !after.ok() && after.status.is_some() {
            // An error answer came back at once: sporadic, not held capacity. Ask once more.
            after = self.send(&small).await;
        }
        let mut ev = after.evidence(self.key.as_ref());
        ev.notes.push(format!(
            "baseline {:.0} ms (slower of two idle requests); {started} of {} streams of {} tokens abandoned after their first token",
            ms(baseline),
            abandoned.len(),
            self.options.abandoned_max_tokens
        ));
        if started == 0 {
            return result(
                kind,
                ProbeOutcome::Fail,
                "no stream produced a first token, so none could be abandoned",
                ev,
            );
        }
        if !after.ok() {
            return result(
                kind,
                ProbeOutcome::Fail,
                format!("the request after the abandoned streams failed: {}", after.describe()),
                ev,
            );
        }
        // Generous: the machine is noisy, and a held slot costs seconds, not milliseconds.
        let bound = baseline * 3 + Duration::from_millis(300);
        if after.elapsed <= bound {
            result(
                kind,
                ProbeOutcome::Pass,
                format!(
                    "the next request took {:.0} ms vs {:.0} ms idle",
                    ms(after.elapsed),
                    ms(baseline)
                ),
                ev,
            )
        } else {
            result(
                kind,
                ProbeOutcome::Fail,
                format!(
                    "the next request took {:.0} ms vs {:.0} ms idle: abandoned streams still hold capacity",
                    ms(after.elapsed),
                    ms(baseline)
                ),
                ev,
            )
        }
    }
}
