//! Audit-log queries, written once for both backends: `audit_queries!` expands to these `Store`
//! methods in `lib.rs` (`impl_store!`). The table refuses updates and deletes (triggers).

/// `WHERE …` for an [`AuditFilter`] with `$1..$4` bound by `bind_audit_filter!` (NULL = any).
macro_rules! audit_where {
    () => {
        " WHERE ($1 IS NULL OR actor = $1) \
           AND ($2 IS NULL OR action = $2 OR (substr($2, length($2), 1) = '.' AND substr(action, 1, length($2)) = $2)) \
           AND ($3 IS NULL OR at >= $3) AND ($4 IS NULL OR at < $4)"
    };
}
pub(crate) use audit_where;

macro_rules! bind_audit_filter {
    ($query:expr, $filter:expr) => {
        $query
            .bind($filter.actor.as_deref())
            .bind($filter.action.as_deref())
            .bind($filter.from.map(|t| t.0))
            .bind($filter.before.map(|t| t.0))
    };
}
pub(crate) use bind_audit_filter;

macro_rules! audit_queries {
    () => {
        #[tracing::instrument(level = "debug", skip(self, entry), fields(action = entry.action.as_str()))]
        fn append_audit<'a>(&'a self, entry: &'a NewAuditEntry) -> StoreFuture<'a, i64> {
            Box::pin(async move {
                Ok(sqlx::query_scalar(
                    "INSERT INTO audit_log (at, actor, action, target, detail) VALUES ($1, $2, $3, $4, $5) RETURNING id",
                )
                .bind(Timestamp::now().0)
                .bind(&entry.actor)
                .bind(entry.action.as_str())
                .bind(&entry.target)
                .bind(&entry.detail)
                .fetch_one(self.pool())
                .await?)
            })
        }

        #[tracing::instrument(level = "debug", skip(self))]
        fn list_audit<'a>(&'a self, filter: &'a AuditFilter, limit: i64, offset: i64) -> StoreFuture<'a, Vec<AuditEntry>> {
            Box::pin(async move {
                let query = sqlx::query_as::<_, (i64, i64, String, String, String, String)>(concat!(
                    "SELECT id, at, actor, action, target, detail FROM audit_log",
                    audit::audit_where!(),
                    " ORDER BY id DESC LIMIT $5 OFFSET $6"
                ));
                let rows = audit::bind_audit_filter!(query, filter)
                    .bind(limit)
                    .bind(offset)
                    .fetch_all(self.pool())
                    .await?;
                Ok(rows
                    .into_iter()
                    .map(|(id, at, actor, action, target, detail)| AuditEntry {
                        id,
                        at: Timestamp(at),
                        actor,
                        action,
                        target,
                        detail,
                    })
                    .collect())
            })
        }

        #[tracing::instrument(level = "debug", skip(self))]
        fn count_audit<'a>(&'a self, filter: &'a AuditFilter) -> StoreFuture<'a, i64> {
            Box::pin(async move {
                let query = sqlx::query_scalar(concat!("SELECT COUNT(*) FROM audit_log", audit::audit_where!()));
                Ok(audit::bind_audit_filter!(query, filter).fetch_one(self.pool()).await?)
            })
        }
    };
}
pub(crate) use audit_queries;
