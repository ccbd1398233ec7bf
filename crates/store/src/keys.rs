//! API keys. A token is `mx_` followed by 64 hex digits of randomness; the database keeps only its
//! BLAKE3 hash, so a leaked database does not leak usable tokens.
use chrono::{DateTime, Utc};
use uuid::Uuid;

use crate::{Namespace, Result, Store, StoreError};

/// What a key may do in its namespace. Each level includes the ones below it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Access {
    Read = 1,
    Write = 2,
    Admin = 3,
}

impl Access {
    pub fn from_i16(v: i16) -> Option<Access> {
        match v {
            1 => Some(Access::Read),
            2 => Some(Access::Write),
            3 => Some(Access::Admin),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Access::Read => "read",
            Access::Write => "write",
            Access::Admin => "admin",
        }
    }
}

impl std::str::FromStr for Access {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        match s {
            "read" => Ok(Access::Read),
            "write" => Ok(Access::Write),
            "admin" => Ok(Access::Admin),
            _ => Err(format!("unknown right {s:?}; expected read, write or admin")),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiKey {
    pub id: Uuid,
    pub namespace: Namespace,
    pub name: String,
    pub access: Access,
    pub created_at: DateTime<Utc>,
    pub revoked_at: Option<DateTime<Utc>>,
    /// Set by a rotation: the key works until then.
    pub expires_at: Option<DateTime<Utc>>,
}

/// A live key found by its token, and the time it has left by the database's clock (a
/// rotation's overlap). Replicas count expiry down from that on their monotonic clocks, so a
/// replica whose wall clock is off never keeps an expired key alive, nor ends one early.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Authenticated {
    pub key: ApiKey,
    pub expires_in: Option<std::time::Duration>,
}

/// A freshly created key and its token, which is shown once and stored nowhere.
#[derive(Debug, Clone)]
pub struct NewApiKey {
    pub key: ApiKey,
    pub token: String,
}

/// The stored form of a token.
pub fn token_hash(token: &str) -> [u8; 32] {
    *blake3::hash(token.as_bytes()).as_bytes()
}

fn new_token() -> String {
    // Two v4 UUIDs: 244 bits from the OS random source.
    format!("mx_{}{}", Uuid::new_v4().simple(), Uuid::new_v4().simple())
}

type KeyRow = (
    Uuid,
    String,
    i16,
    DateTime<Utc>,
    Option<DateTime<Utc>>,
    Option<DateTime<Utc>>,
    Uuid,
    String,
    DateTime<Utc>,
    Option<f64>,
);

/// The last column is the seconds left before `expires_at` by the database's clock.
const KEY_COLUMNS: &str =
    "k.id, k.name, k.access, k.created_at, k.revoked_at, k.expires_at, n.id, n.name, n.created_at,
     extract(epoch FROM k.expires_at - now())::float8";

fn key_from_row(row: KeyRow) -> Result<ApiKey> {
    timed_key_from_row(row).map(|(k, _)| k)
}

/// The key, and the seconds it has left (None: no expiry).
fn timed_key_from_row(row: KeyRow) -> Result<(ApiKey, Option<f64>)> {
    let (id, name, access, created_at, revoked_at, expires_at, ns_id, ns_name, ns_created, left) = row;
    let access = Access::from_i16(access)
        .ok_or_else(|| StoreError::Database(sqlx::Error::Decode(format!("bad access level {access}").into())))?;
    let key = ApiKey {
        id,
        namespace: Namespace { id: ns_id, name: ns_name, created_at: ns_created },
        name,
        access,
        created_at,
        revoked_at,
        expires_at,
    };
    Ok((key, left))
}

impl Store {
    #[tracing::instrument(name = "store.create_api_key", level = "debug", skip_all, fields(otel.kind = "client", db.system.name = "postgresql", db.operation.name = "create_api_key"))]
    pub async fn create_api_key(&self, namespace: &Namespace, name: &str, access: Access) -> Result<NewApiKey> {
        let token = new_token();
        let id = Uuid::now_v7();
        let (created_at,): (DateTime<Utc>,) = sqlx::query_as(
            "INSERT INTO api_keys (id, namespace_id, name, token_hash, access) VALUES ($1, $2, $3, $4, $5) RETURNING created_at",
        )
        .bind(id)
        .bind(namespace.id)
        .bind(name)
        .bind(&token_hash(&token)[..])
        .bind(access as i16)
        .fetch_one(&self.pool)
        .await?;
        let key = ApiKey {
            id,
            namespace: namespace.clone(),
            name: name.to_owned(),
            access,
            created_at,
            revoked_at: None,
            expires_at: None,
        };
        Ok(NewApiKey { key, token })
    }

    /// The live (unrevoked, unexpired) key whose token this is, if any, and its time left.
    #[tracing::instrument(name = "store.authenticate", level = "debug", skip_all, fields(otel.kind = "client", db.system.name = "postgresql", db.operation.name = "authenticate"))]
    pub async fn authenticate(&self, token: &str) -> Result<Option<Authenticated>> {
        let sql = const_format_key_query(
            "WHERE k.token_hash = $1 AND k.revoked_at IS NULL AND (k.expires_at IS NULL OR k.expires_at > now())",
        );
        let row: Option<KeyRow> =
            sqlx::query_as(sqlx::AssertSqlSafe(sql)).bind(&token_hash(token)[..]).fetch_optional(&self.pool).await?;
        let Some((key, left)) = row.map(timed_key_from_row).transpose()? else { return Ok(None) };
        let expires_in = left.map(|s| std::time::Duration::try_from_secs_f64(s).unwrap_or_default());
        Ok(Some(Authenticated { key, expires_in }))
    }

    #[tracing::instrument(name = "store.list_api_keys", level = "debug", skip_all, fields(otel.kind = "client", db.system.name = "postgresql", db.operation.name = "list_api_keys"))]
    pub async fn list_api_keys(&self, namespace: &Namespace) -> Result<Vec<ApiKey>> {
        let sql = const_format_key_query("WHERE k.namespace_id = $1 ORDER BY k.created_at, k.id");
        let rows: Vec<KeyRow> =
            sqlx::query_as(sqlx::AssertSqlSafe(sql)).bind(namespace.id).fetch_all(&self.pool).await?;
        rows.into_iter().map(key_from_row).collect()
    }

    /// Rotates a live key: a new key of the same name and rights, and the old one expiring after
    /// `overlap` (at once when zero; never later than an expiry it already had), so that clients
    /// can move to the new token without a moment where neither works.
    #[tracing::instrument(name = "store.rotate_api_key", level = "debug", skip_all, fields(otel.kind = "client", db.system.name = "postgresql", db.operation.name = "rotate_api_key"))]
    pub async fn rotate_api_key(
        &self,
        namespace: &Namespace,
        key_id: Uuid,
        overlap: std::time::Duration,
    ) -> Result<(NewApiKey, ApiKey)> {
        let sql = const_format_key_query("WHERE k.id = $1 AND k.namespace_id = $2");
        let row: Option<KeyRow> =
            sqlx::query_as(sqlx::AssertSqlSafe(sql)).bind(key_id).bind(namespace.id).fetch_optional(&self.pool).await?;
        let (old, left) = row.map(timed_key_from_row).transpose()?.ok_or(StoreError::KeyNotFound(key_id))?;
        if old.revoked_at.is_some() || left.is_some_and(|s| s <= 0.0) {
            return Err(memex_event::FieldError::new("key_id", format!("key {key_id} is revoked or expired")).into());
        }
        let created = self.create_api_key(namespace, &old.name, old.access).await?;
        let secs = overlap.as_secs_f64();
        sqlx::query(
            "UPDATE api_keys SET expires_at = LEAST(coalesce(expires_at, 'infinity'), now() + make_interval(secs => $3))
             WHERE id = $1 AND namespace_id = $2",
        )
        .bind(key_id)
        .bind(namespace.id)
        .bind(secs)
        .execute(&self.pool)
        .await?;
        let sql = const_format_key_query("WHERE k.id = $1");
        let row: KeyRow = sqlx::query_as(sqlx::AssertSqlSafe(sql)).bind(key_id).fetch_one(&self.pool).await?;
        Ok((created, key_from_row(row)?))
    }

    /// Revokes a key (idempotent: revoking twice keeps the first revocation time).
    #[tracing::instrument(name = "store.revoke_api_key", level = "debug", skip_all, fields(otel.kind = "client", db.system.name = "postgresql", db.operation.name = "revoke_api_key"))]
    pub async fn revoke_api_key(&self, namespace: &Namespace, key_id: Uuid) -> Result<ApiKey> {
        let updated = sqlx::query(
            "UPDATE api_keys SET revoked_at = COALESCE(revoked_at, now()) WHERE id = $1 AND namespace_id = $2",
        )
        .bind(key_id)
        .bind(namespace.id)
        .execute(&self.pool)
        .await?;
        if updated.rows_affected() == 0 {
            return Err(StoreError::KeyNotFound(key_id));
        }
        let sql = const_format_key_query("WHERE k.id = $1");
        let row: KeyRow = sqlx::query_as(sqlx::AssertSqlSafe(sql)).bind(key_id).fetch_one(&self.pool).await?;
        key_from_row(row)
    }
}

fn const_format_key_query(tail: &str) -> String {
    format!("SELECT {KEY_COLUMNS} FROM api_keys k JOIN namespaces n ON n.id = k.namespace_id {tail}")
}
