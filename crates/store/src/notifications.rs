//! Notification targets and their delivery log (`notification_targets`,
//! `notification_deliveries`), written once for both backends: `notification_queries!` expands
//! to the methods of `NotificationStore` in `lib.rs` (`impl_store!`), so its paths are written
//! as seen from there. Secrets are sealed bound to the target ("notification target ID").
use super::text::TextCodec;
use super::{Result, StoreError};
use crate::domain::Timestamp;
use crate::domain::notify::{Delivery, DeliveryStatus, Target, TargetKind};

/// What a target's sealed values are bound to.
pub(crate) fn owner(target_id: i64) -> String {
    format!("notification target {target_id}")
}

/// One row of `notification_targets` without its sealed columns.
#[derive(Debug, sqlx::FromRow)]
pub(crate) struct TargetRow {
    id: i64,
    name: String,
    kind: String,
    url_shown: String,
    schedule_id: Option<i64>,
    profile_id: Option<i64>,
    created_at: i64,
}

impl TargetRow {
    pub(crate) fn into_target(self, text: TextCodec) -> Result<Target> {
        let kind = TargetKind::parse(&self.kind).ok_or_else(|| {
            StoreError::Corrupt(format!(
                "notification_targets.kind of target {} is {:?}",
                self.id, self.kind
            ))
        })?;
        Ok(Target {
            id: self.id,
            name: text.decode(self.name),
            kind,
            url_shown: text.decode(self.url_shown),
            schedule_id: self.schedule_id,
            profile_id: self.profile_id,
            created_at: Timestamp(self.created_at),
        })
    }
}

/// One row of `notification_deliveries` without its body.
#[derive(Debug, sqlx::FromRow)]
pub(crate) struct DeliveryRow {
    pub(crate) id: i64,
    target_id: i64,
    event_key: String,
    run_id: Option<i64>,
    message: String,
    status: String,
    attempts: i64,
    pub(crate) next_attempt_at: i64,
    last_error: Option<String>,
    created_at: i64,
    delivered_at: Option<i64>,
}

impl DeliveryRow {
    pub(crate) fn into_delivery(self, text: TextCodec) -> Result<Delivery> {
        let status = DeliveryStatus::parse(&self.status).ok_or_else(|| {
            StoreError::Corrupt(format!(
                "notification_deliveries.status of {} is {:?}",
                self.id, self.status
            ))
        })?;
        Ok(Delivery {
            id: self.id,
            target_id: self.target_id,
            event_key: self.event_key,
            run_id: self.run_id,
            message: text.decode(self.message),
            status,
            attempts: self.attempts.clamp(0, i64::from(u32::MAX)) as u32,
            next_attempt_at: Timestamp(self.next_attempt_at),
            last_error: text.decode_opt(self.last_error),
            created_at: Timestamp(self.created_at),
            delivered_at: self.delivered_at.map(Timestamp),
        })
    }
}

macro_rules! target_columns {
    () => {
        "id, name, kind, url_shown, schedule_id, profile_id, created_at"
    };
}
pub(crate) use target_columns;

macro_rules! delivery_columns {
    () => {
        "id, target_id, event_key, run_id, message, status, attempts, next_attempt_at, last_error, created_at, delivered_at"
    };
}
pub(crate) use delivery_columns;

macro_rules! notification_queries {
    () => {
        fn create_target<'a>(&'a self, spec: &'a TargetSpec) -> StoreFuture<'a, i64> {
            Box::pin(async move {
                let url = spec.url.trim();
                let shown = spec.url_shown();
                let mut tx = self.begin_write().await?;
                let id: i64 = sqlx::query_scalar(
                    "INSERT INTO notification_targets (name, kind, url_shown, schedule_id, profile_id, created_at) \
                     VALUES ($1, $2, $3, $4, $5, $6) RETURNING id",
                )
                .bind(Self::TEXT.encode(&spec.name))
                .bind(spec.kind.as_str())
                .bind(Self::TEXT.encode(&shown))
                .bind(spec.schedule_id)
                .bind(spec.profile_id)
                .bind(Timestamp::now().0)
                .fetch_one(&mut *tx)
                .await
                .map_err(|e| {
                    rows::conflict_on_unique(e, || {
                        format!("a notification target named {:?} exists", spec.name)
                    })
                })
                .map_err(|e| rows::not_found_on_foreign_key(e, || "the schedule or profile".to_string()))?;
                let owner = notifications::owner(id);
                let url_sealed = (spec.kind == TargetKind::Slack).then(|| self.sealer().seal_bound(&owner, url));
                let secret = spec
                    .secret
                    .as_deref()
                    .map(|s| self.sealer().seal_bound(&owner, s.trim()));
                sqlx::query("UPDATE notification_targets SET url_sealed = $2, secret = $3 WHERE id = $1")
                    .bind(id)
                    .bind(url_sealed)
                    .bind(secret)
                    .execute(&mut *tx)
                    .await?;
                tx.commit().await?;
                Ok(id)
            })
        }

        fn list_targets(&self) -> StoreFuture<'_, Vec<Target>> {
            Box::pin(async move {
                let rows: Vec<notifications::TargetRow> = sqlx::query_as(concat!(
                    "SELECT ",
                    notifications::target_columns!(),
                    " FROM notification_targets ORDER BY name, id"
                ))
                .fetch_all(self.pool())
                .await?;
                rows.into_iter().map(|r| r.into_target(Self::TEXT)).collect()
            })
        }

        fn delete_target(&self, id: i64) -> StoreFuture<'_, bool> {
            Box::pin(async move {
                let done = sqlx::query("DELETE FROM notification_targets WHERE id = $1")
                    .bind(id)
                    .execute(self.pool())
                    .await?;
                Ok(done.rows_affected() > 0)
            })
        }

        fn target_secrets(&self, id: i64) -> StoreFuture<'_, Option<TargetSecrets>> {
            Box::pin(async move {
                let row: Option<(String, String, Option<String>, Option<String>)> = sqlx::query_as(
                    "SELECT kind, url_shown, url_sealed, secret FROM notification_targets WHERE id = $1",
                )
                .bind(id)
                .fetch_optional(self.pool())
                .await?;
                let Some((kind, shown, url_sealed, secret)) = row else {
                    return Ok(None);
                };
                let owner = notifications::owner(id);
                let open = |v: &str| {
                    self.sealer()
                        .open_bound(&owner, v)
                        .map_err(|e| StoreError::Key(format!("notification target {id}: {e}")))
                };
                let url = match (kind.as_str(), url_sealed) {
                    ("slack", Some(sealed)) => open(&sealed)?,
                    _ => Self::TEXT.decode(shown),
                };
                let secret = secret.map(|s| open(&s)).transpose()?;
                Ok(Some(TargetSecrets { url, secret }))
            })
        }

        fn enqueue_delivery<'a>(&'a self, delivery: &'a NewDelivery) -> StoreFuture<'a, bool> {
            Box::pin(async move {
                let now = Timestamp::now().0;
                let done = sqlx::query(
                    "INSERT INTO notification_deliveries (target_id, event_key, run_id, message, body, status, \
                     attempts, next_attempt_at, created_at) VALUES ($1, $2, $3, $4, $5, 'pending', 0, $6, $6) \
                     ON CONFLICT (target_id, event_key) DO NOTHING",
                )
                .bind(delivery.target_id)
                .bind(&delivery.event_key)
                .bind(delivery.run_id)
                .bind(Self::TEXT.encode(&delivery.message))
                .bind(Self::TEXT.encode(&delivery.body))
                .bind(now)
                .execute(self.pool())
                .await
                .map_err(StoreError::from)
                .map_err(|e| {
                    rows::not_found_on_foreign_key(e, || format!("notification target {}", delivery.target_id))
                })?;
                Ok(done.rows_affected() > 0)
            })
        }

        fn claim_due_delivery<'a>(
            &'a self,
            now: Timestamp,
            lease_ms: i64,
        ) -> StoreFuture<'a, Option<(Delivery, String)>> {
            Box::pin(async move {
                let mut tx = self.begin_write().await?;
                let row: Option<notifications::DeliveryRow> = sqlx::query_as(concat!(
                    "SELECT ",
                    notifications::delivery_columns!(),
                    " FROM notification_deliveries WHERE status = 'pending' AND next_attempt_at <= $1 \
                     ORDER BY next_attempt_at, id LIMIT 1"
                ))
                .bind(now.0)
                .fetch_optional(&mut *tx)
                .await?;
                let Some(row) = row else {
                    tx.rollback().await?;
                    return Ok(None);
                };
                // Leased: another scheduler skips it until the attempt has had its time.
                let claimed = sqlx::query(
                    "UPDATE notification_deliveries SET next_attempt_at = $3 WHERE id = $1 AND next_attempt_at = $2 \
                     AND status = 'pending'",
                )
                .bind(row.id)
                .bind(row.next_attempt_at)
                .bind(now.0 + lease_ms)
                .execute(&mut *tx)
                .await?;
                if claimed.rows_affected() == 0 {
                    tx.rollback().await?;
                    return Ok(None);
                }
                let body: String = sqlx::query_scalar("SELECT body FROM notification_deliveries WHERE id = $1")
                    .bind(row.id)
                    .fetch_one(&mut *tx)
                    .await?;
                tx.commit().await?;
                Ok(Some((row.into_delivery(Self::TEXT)?, Self::TEXT.decode(body))))
            })
        }

        fn finish_delivery<'a>(
            &'a self,
            id: i64,
            status: DeliveryStatus,
            next_attempt_at: Timestamp,
            error: Option<&'a str>,
        ) -> StoreFuture<'a, ()> {
            Box::pin(async move {
                let now = Timestamp::now().0;
                sqlx::query(
                    "UPDATE notification_deliveries SET status = $2, attempts = attempts + 1, next_attempt_at = $3, \
                     last_error = $4, delivered_at = CASE WHEN $2 = 'delivered' THEN $5 ELSE delivered_at END \
                     WHERE id = $1",
                )
                .bind(id)
                .bind(status.as_str())
                .bind(next_attempt_at.0)
                .bind(Self::TEXT.encode_opt(error))
                .bind(now)
                .execute(self.pool())
                .await?;
                Ok(())
            })
        }

        fn list_deliveries(&self, target_id: Option<i64>, limit: i64) -> StoreFuture<'_, Vec<Delivery>> {
            Box::pin(async move {
                let rows: Vec<notifications::DeliveryRow> = sqlx::query_as(concat!(
                    "SELECT ",
                    notifications::delivery_columns!(),
                    " FROM notification_deliveries WHERE ($1 IS NULL OR target_id = $1) ORDER BY id DESC LIMIT $2"
                ))
                .bind(target_id)
                .bind(limit.max(0))
                .fetch_all(self.pool())
                .await?;
                rows.into_iter().map(|r| r.into_delivery(Self::TEXT)).collect()
            })
        }
    };
}
pub(crate) use notification_queries;
