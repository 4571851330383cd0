//! The review queue, labels and blind preferences (`review_items`, `review_labels`,
//! `review_preferences`; issue 50), written once for both backends: `review_queries!` expands
//! to the methods of [`crate::ReviewStore`] in `lib.rs` (`impl_store!`), so its paths are
//! written as seen from there.
use super::text::TextCodec;
use super::{Result, StoreError};
use crate::domain::Timestamp;
use crate::domain::review::pairwise::{Choice, Preference};
use crate::domain::review::{ItemStatus, Label, Reason, ReviewItem, Verdict};

#[derive(Debug, sqlx::FromRow)]
pub(crate) struct ItemRow {
    id: i64,
    run_id: i64,
    candidate_id: i64,
    case_id: String,
    repetition: i64,
    reasons: String,
    detail: String,
    status: String,
    assignee: Option<String>,
    claimed_by: Option<String>,
    added_by: String,
    created_at: i64,
}

/// Reasons as stored: comma-separated, in order.
pub(crate) fn reasons_text(reasons: &[Reason]) -> String {
    reasons.iter().map(|r| r.as_str()).collect::<Vec<_>>().join(",")
}

impl ItemRow {
    pub(crate) fn into_item(self, text: TextCodec) -> Result<ReviewItem> {
        let corrupt = |what: &str, value: &str| {
            StoreError::Corrupt(format!("review_items.{what} of item {} is {value:?}", self.id))
        };
        let reasons = self
            .reasons
            .split(',')
            .filter(|r| !r.is_empty())
            .map(|r| Reason::parse(r).ok_or_else(|| corrupt("reasons", r)))
            .collect::<Result<Vec<_>>>()?;
        let status = ItemStatus::parse(&self.status).ok_or_else(|| corrupt("status", &self.status))?;
        Ok(ReviewItem {
            id: self.id,
            run_id: self.run_id,
            candidate_id: self.candidate_id,
            case_id: text.decode(self.case_id),
            repetition: u32::try_from(self.repetition)
                .map_err(|_| corrupt("repetition", &self.repetition.to_string()))?,
            reasons,
            detail: text.decode(self.detail),
            status,
            assignee: self.assignee,
            claimed_by: self.claimed_by,
            added_by: self.added_by,
            created_at: Timestamp(self.created_at),
        })
    }
}

#[derive(Debug, sqlx::FromRow)]
pub(crate) struct LabelRow {
    id: i64,
    item_id: i64,
    labeller: String,
    verdict: String,
    score: Option<f64>,
    corrected_expected: Option<String>,
    note: String,
    labelled_at: i64,
}

impl LabelRow {
    pub(crate) fn into_label(self, text: TextCodec) -> Result<Label> {
        let verdict = Verdict::parse(&self.verdict).ok_or_else(|| {
            StoreError::Corrupt(format!(
                "review_labels.verdict of label {} is {:?}",
                self.id, self.verdict
            ))
        })?;
        Ok(Label {
            id: self.id,
            item_id: self.item_id,
            labeller: self.labeller,
            verdict,
            score: self.score,
            corrected_expected: self.corrected_expected.map(|c| text.decode(c)),
            note: text.decode(self.note),
            labelled_at: Timestamp(self.labelled_at),
        })
    }
}

#[derive(Debug, sqlx::FromRow)]
pub(crate) struct PreferenceRow {
    id: i64,
    case_id: String,
    left_candidate: i64,
    right_candidate: i64,
    choice: String,
    picker: String,
    left_chars: i64,
    right_chars: i64,
}

impl PreferenceRow {
    pub(crate) fn into_preference(self, text: TextCodec) -> Result<Preference> {
        let choice = Choice::parse(&self.choice).ok_or_else(|| {
            StoreError::Corrupt(format!("review_preferences.choice of {} is {:?}", self.id, self.choice))
        })?;
        Ok(Preference {
            case_id: text.decode(self.case_id),
            left_candidate: self.left_candidate,
            right_candidate: self.right_candidate,
            choice,
            picker: self.picker,
            left_chars: u32::try_from(self.left_chars).unwrap_or(u32::MAX),
            right_chars: u32::try_from(self.right_chars).unwrap_or(u32::MAX),
        })
    }
}

macro_rules! review_queries {
    () => {
        fn add_review_items<'a>(&'a self, items: &'a [NewReviewItem], now: Timestamp) -> StoreFuture<'a, u64> {
            Box::pin(async move {
                let mut tx = self.begin_write().await?;
                let mut added = 0;
                for item in items {
                    let done = sqlx::query(
                        "INSERT INTO review_items (run_id, candidate_id, case_id, repetition, reasons, detail, \
                         added_by, created_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8) \
                         ON CONFLICT (run_id, candidate_id, case_id, repetition) DO NOTHING",
                    )
                    .bind(item.run_id)
                    .bind(item.candidate_id)
                    .bind(Self::TEXT.encode(&item.case_id))
                    .bind(i64::from(item.repetition))
                    .bind(review::reasons_text(&item.reasons))
                    .bind(Self::TEXT.encode(&item.detail))
                    .bind(&item.added_by)
                    .bind(now.0)
                    .execute(&mut *tx)
                    .await;
                    match done {
                        Ok(done) => added += done.rows_affected(),
                        Err(e) => {
                            tx.rollback().await?;
                            return Err(rows::not_found_on_foreign_key(e.into(), || format!("run {}", item.run_id)));
                        }
                    }
                }
                tx.commit().await?;
                Ok(added)
            })
        }

        fn list_review_items(&self, run_id: Option<i64>, limit: i64) -> StoreFuture<'_, Vec<ReviewItem>> {
            Box::pin(async move {
                let rows: Vec<review::ItemRow> = sqlx::query_as(
                    "SELECT id, run_id, candidate_id, case_id, repetition, reasons, detail, status, assignee, \
                     claimed_by, added_by, created_at FROM review_items WHERE ($1 IS NULL OR run_id = $1) \
                     ORDER BY id LIMIT $2",
                )
                .bind(run_id)
                .bind(limit.max(0))
                .fetch_all(self.pool())
                .await?;
                rows.into_iter().map(|r| r.into_item(Self::TEXT)).collect()
            })
        }

        fn list_review_items_page(
            &self,
            run_id: Option<i64>,
            offset: i64,
            limit: i64,
        ) -> StoreFuture<'_, Vec<ReviewItem>> {
            Box::pin(async move {
                let rows: Vec<review::ItemRow> = sqlx::query_as(
                    "SELECT id, run_id, candidate_id, case_id, repetition, reasons, detail, status, assignee, \
                     claimed_by, added_by, created_at FROM review_items WHERE ($1 IS NULL OR run_id = $1) \
                     ORDER BY id LIMIT $2 OFFSET $3",
                )
                .bind(run_id)
                .bind(limit.max(0))
                .bind(offset.max(0))
                .fetch_all(self.pool())
                .await?;
                rows.into_iter().map(|r| r.into_item(Self::TEXT)).collect()
            })
        }

        fn review_progress(&self, run_id: Option<i64>) -> StoreFuture<'_, Progress> {
            Box::pin(async move {
                let (total, labelled, claimed, skipped): (i64, i64, i64, i64) = sqlx::query_as(
                    "SELECT COUNT(*), \
                     COALESCE(SUM(CASE WHEN status = 'labelled' THEN 1 ELSE 0 END), 0), \
                     COALESCE(SUM(CASE WHEN status = 'claimed' THEN 1 ELSE 0 END), 0), \
                     COALESCE(SUM(CASE WHEN status = 'skipped' THEN 1 ELSE 0 END), 0) \
                     FROM review_items WHERE ($1 IS NULL OR run_id = $1)",
                )
                .bind(run_id)
                .fetch_one(self.pool())
                .await?;
                let (disagreements,): (i64,) = sqlx::query_as(
                    "SELECT COUNT(*) FROM (SELECT l.item_id FROM review_labels l \
                     JOIN review_items i ON i.id = l.item_id WHERE ($1 IS NULL OR i.run_id = $1) \
                     GROUP BY l.item_id HAVING COUNT(DISTINCT l.verdict) > 1) d",
                )
                .bind(run_id)
                .fetch_one(self.pool())
                .await?;
                let count = |n: i64| u64::try_from(n).unwrap_or(0);
                Ok(Progress {
                    total: count(total),
                    labelled: count(labelled),
                    claimed: count(claimed),
                    skipped: count(skipped),
                    disagreements: count(disagreements),
                })
            })
        }

        fn offered_review_items<'a>(
            &'a self,
            run_id: Option<i64>,
            who: &'a str,
            after: Option<QueuePlace>,
            limit: i64,
        ) -> StoreFuture<'a, Vec<ReviewItem>> {
            Box::pin(async move {
                // The place is (skipped ? 1 : 0, id), compared as a pair: keyset paging.
                let rows: Vec<review::ItemRow> = sqlx::query_as(
                    "SELECT id, run_id, candidate_id, case_id, repetition, reasons, detail, status, assignee, \
                     claimed_by, added_by, created_at FROM review_items \
                     WHERE ($1 IS NULL OR run_id = $1) AND status <> 'labelled' \
                     AND (assignee IS NULL OR assignee = $2) AND (status <> 'claimed' OR claimed_by = $2) \
                     AND ($3 IS NULL OR (CASE WHEN status = 'skipped' THEN 1 ELSE 0 END) > $3 \
                          OR ((CASE WHEN status = 'skipped' THEN 1 ELSE 0 END) = $3 AND id > $4)) \
                     ORDER BY CASE WHEN status = 'skipped' THEN 1 ELSE 0 END, id LIMIT $5",
                )
                .bind(run_id)
                .bind(who)
                .bind(after.map(|p| i64::from(p.skipped)))
                .bind(after.map_or(0, |p| p.id))
                .bind(limit.max(0))
                .fetch_all(self.pool())
                .await?;
                rows.into_iter().map(|r| r.into_item(Self::TEXT)).collect()
            })
        }

        fn get_review_item(&self, id: i64) -> StoreFuture<'_, Option<ReviewItem>> {
            Box::pin(async move {
                let row: Option<review::ItemRow> = sqlx::query_as(
                    "SELECT id, run_id, candidate_id, case_id, repetition, reasons, detail, status, assignee, \
                     claimed_by, added_by, created_at FROM review_items WHERE id = $1",
                )
                .bind(id)
                .fetch_optional(self.pool())
                .await?;
                row.map(|r| r.into_item(Self::TEXT)).transpose()
            })
        }

        fn claim_review_item<'a>(&'a self, id: i64, who: &'a str) -> StoreFuture<'a, bool> {
            Box::pin(async move {
                let done = sqlx::query(
                    "UPDATE review_items SET status = 'claimed', claimed_by = $2 WHERE id = $1 \
                     AND status <> 'labelled' AND (status <> 'claimed' OR claimed_by = $2) \
                     AND (assignee IS NULL OR assignee = $2)",
                )
                .bind(id)
                .bind(who)
                .execute(self.pool())
                .await?;
                Ok(done.rows_affected() > 0)
            })
        }

        fn skip_review_item<'a>(&'a self, id: i64, who: &'a str) -> StoreFuture<'a, bool> {
            Box::pin(async move {
                let done = sqlx::query(
                    "UPDATE review_items SET status = 'skipped', claimed_by = NULL WHERE id = $1 \
                     AND status <> 'labelled' AND (status <> 'claimed' OR claimed_by = $2)",
                )
                .bind(id)
                .bind(who)
                .execute(self.pool())
                .await?;
                Ok(done.rows_affected() > 0)
            })
        }

        fn assign_review_item<'a>(&'a self, id: i64, assignee: Option<&'a str>) -> StoreFuture<'a, bool> {
            Box::pin(async move {
                let done = sqlx::query("UPDATE review_items SET assignee = $2 WHERE id = $1")
                    .bind(id)
                    .bind(assignee)
                    .execute(self.pool())
                    .await?;
                Ok(done.rows_affected() > 0)
            })
        }

        fn save_review_label<'a>(
            &'a self,
            item_id: i64,
            labeller: &'a str,
            body: &'a LabelBody,
            now: Timestamp,
        ) -> StoreFuture<'a, i64> {
            Box::pin(async move {
                let mut tx = self.begin_write().await?;
                let saved: std::result::Result<(i64,), sqlx::Error> = sqlx::query_as(
                    "INSERT INTO review_labels (item_id, labeller, verdict, score, corrected_expected, note, labelled_at) \
                     VALUES ($1, $2, $3, $4, $5, $6, $7) ON CONFLICT (item_id, labeller) DO UPDATE SET \
                     verdict = excluded.verdict, score = excluded.score, \
                     corrected_expected = excluded.corrected_expected, note = excluded.note, \
                     labelled_at = excluded.labelled_at RETURNING id",
                )
                .bind(item_id)
                .bind(labeller)
                .bind(body.verdict.as_str())
                .bind(body.score)
                .bind(body.corrected_expected.as_deref().map(|c| Self::TEXT.encode(c)))
                .bind(Self::TEXT.encode(&body.note))
                .bind(now.0)
                .fetch_one(&mut *tx)
                .await;
                let (id,) = match saved {
                    Ok(id) => id,
                    Err(e) => {
                        tx.rollback().await?;
                        return Err(rows::not_found_on_foreign_key(e.into(), || format!("review item {item_id}")));
                    }
                };
                sqlx::query("UPDATE review_items SET status = 'labelled', claimed_by = NULL WHERE id = $1")
                    .bind(item_id)
                    .execute(&mut *tx)
                    .await?;
                tx.commit().await?;
                Ok(id)
            })
        }

        fn list_review_labels(&self, run_id: Option<i64>) -> StoreFuture<'_, Vec<Label>> {
            Box::pin(async move {
                let rows: Vec<review::LabelRow> = sqlx::query_as(
                    "SELECT l.id, l.item_id, l.labeller, l.verdict, l.score, l.corrected_expected, l.note, \
                     l.labelled_at FROM review_labels l JOIN review_items i ON i.id = l.item_id \
                     WHERE ($1 IS NULL OR i.run_id = $1) ORDER BY l.item_id, l.labelled_at, l.id",
                )
                .bind(run_id)
                .fetch_all(self.pool())
                .await?;
                rows.into_iter().map(|r| r.into_label(Self::TEXT)).collect()
            })
        }

        fn list_review_labels_between(&self, run_id: Option<i64>, first: i64, last: i64) -> StoreFuture<'_, Vec<Label>> {
            Box::pin(async move {
                let rows: Vec<review::LabelRow> = sqlx::query_as(
                    "SELECT l.id, l.item_id, l.labeller, l.verdict, l.score, l.corrected_expected, l.note, \
                     l.labelled_at FROM review_labels l JOIN review_items i ON i.id = l.item_id \
                     WHERE ($1 IS NULL OR i.run_id = $1) AND l.item_id BETWEEN $2 AND $3 \
                     ORDER BY l.item_id, l.labelled_at, l.id",
                )
                .bind(run_id)
                .bind(first)
                .bind(last)
                .fetch_all(self.pool())
                .await?;
                rows.into_iter().map(|r| r.into_label(Self::TEXT)).collect()
            })
        }

        fn save_preference<'a>(&'a self, run_id: i64, p: &'a Preference, now: Timestamp) -> StoreFuture<'a, i64> {
            Box::pin(async move {
                let (id,): (i64,) = sqlx::query_as(
                    "INSERT INTO review_preferences (run_id, case_id, left_candidate, right_candidate, choice, \
                     picker, left_chars, right_chars, created_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) \
                     RETURNING id",
                )
                .bind(run_id)
                .bind(Self::TEXT.encode(&p.case_id))
                .bind(p.left_candidate)
                .bind(p.right_candidate)
                .bind(p.choice.as_str())
                .bind(&p.picker)
                .bind(i64::from(p.left_chars))
                .bind(i64::from(p.right_chars))
                .bind(now.0)
                .fetch_one(self.pool())
                .await
                .map_err(|e| rows::not_found_on_foreign_key(e.into(), || format!("run {run_id}")))?;
                Ok(id)
            })
        }

        fn list_preferences(&self, run_id: Option<i64>) -> StoreFuture<'_, Vec<Preference>> {
            Box::pin(async move {
                let rows: Vec<review::PreferenceRow> = sqlx::query_as(
                    "SELECT id, case_id, left_candidate, right_candidate, choice, picker, left_chars, right_chars \
                     FROM review_preferences WHERE ($1 IS NULL OR run_id = $1) ORDER BY id",
                )
                .bind(run_id)
                .fetch_all(self.pool())
                .await?;
                rows.into_iter().map(|r| r.into_preference(Self::TEXT)).collect()
            })
        }
    };
}
pub(crate) use review_queries;
