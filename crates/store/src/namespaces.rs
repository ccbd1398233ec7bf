use uuid::Uuid;

use crate::error::is_unique_violation;
use crate::{Namespace, Result, Store, StoreError};

impl Store {
    /// Creates a namespace. Names are 1–63 characters of `[a-z0-9_.-]`, starting with a letter or
    /// digit (the database enforces it too).
    #[tracing::instrument(name = "store.create_namespace", level = "debug", skip_all, fields(otel.kind = "client", db.system.name = "postgresql", db.operation.name = "create_namespace"))]
    pub async fn create_namespace(&self, name: &str) -> Result<Namespace> {
        if !valid_namespace_name(name) {
            return Err(memex_event::FieldError::new(
                "namespace",
                format!("{name:?} is not a valid namespace name: use 1-63 characters of [a-z0-9_.-], starting with a letter or digit"),
            )
            .into());
        }
        let row: std::result::Result<(Uuid, String, chrono::DateTime<chrono::Utc>), sqlx::Error> =
            sqlx::query_as("INSERT INTO namespaces (id, name) VALUES ($1, $2) RETURNING id, name, created_at")
                .bind(Uuid::now_v7())
                .bind(name)
                .fetch_one(&self.pool)
                .await;
        match row {
            Ok((id, name, created_at)) => Ok(Namespace { id, name, created_at }),
            Err(e) if is_unique_violation(&e, "namespaces_name_key") => {
                Err(StoreError::AlreadyExists(format!("namespace {name:?} already exists")))
            }
            Err(e) => Err(e.into()),
        }
    }

    /// The namespace named `name`, or `NamespaceNotFound`.
    #[tracing::instrument(name = "store.namespace", level = "debug", skip_all, fields(otel.kind = "client", db.system.name = "postgresql", db.operation.name = "namespace"))]
    pub async fn namespace(&self, name: &str) -> Result<Namespace> {
        sqlx::query_as("SELECT id, name, created_at FROM namespaces WHERE name = $1")
            .bind(name)
            .fetch_optional(&self.pool)
            .await?
            .map(|(id, name, created_at)| Namespace { id, name, created_at })
            .ok_or_else(|| StoreError::NamespaceNotFound(name.to_owned()))
    }

    #[tracing::instrument(name = "store.list_namespaces", level = "debug", skip_all, fields(otel.kind = "client", db.system.name = "postgresql", db.operation.name = "list_namespaces"))]
    pub async fn list_namespaces(&self) -> Result<Vec<Namespace>> {
        let rows: Vec<(Uuid, String, chrono::DateTime<chrono::Utc>)> =
            sqlx::query_as("SELECT id, name, created_at FROM namespaces ORDER BY name").fetch_all(&self.pool).await?;
        Ok(rows.into_iter().map(|(id, name, created_at)| Namespace { id, name, created_at }).collect())
    }
}

pub fn valid_namespace_name(name: &str) -> bool {
    let b = name.as_bytes();
    !b.is_empty()
        && b.len() <= 63
        && (b[0].is_ascii_lowercase() || b[0].is_ascii_digit())
        && b.iter().all(|&c| c.is_ascii_lowercase() || c.is_ascii_digit() || b"_.-".contains(&c))
}
