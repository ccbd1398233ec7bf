//! Artifact bytes: zstd on the way in, decompression and hash verification on the way out.
use memex_event::ArtifactId;
use sqlx::PgPool;
use uuid::Uuid;

use crate::standby::settled_if;
use crate::{ArtifactRef, Result, Store, StoreError};

const ZSTD_LEVEL: i32 = 3;

pub(crate) fn compress(bytes: &[u8]) -> std::io::Result<Vec<u8>> {
    zstd::bulk::compress(bytes, ZSTD_LEVEL)
}

/// An artifact's metadata and its full, verified bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Artifact {
    pub info: ArtifactRef,
    pub bytes: Vec<u8>,
}

impl Store {
    /// Reads an artifact, decompresses it and checks its bytes hash to its id: a mismatch is
    /// `Corrupt`, never silently served.
    #[tracing::instrument(name = "store.artifact", level = "debug", skip_all, fields(otel.kind = "client", db.system.name = "postgresql", db.operation.name = "artifact"))]
    pub async fn artifact(&self, namespace_id: Uuid, id: ArtifactId) -> Result<Artifact> {
        // Artifacts never change: the standby answers when it has this one.
        let read = |pool: PgPool| async move {
            let q = sqlx::query_as::<_, (i64, String, String, Vec<u8>)>(
                "SELECT size, media_type, compression, data FROM artifacts WHERE namespace_id = $1 AND id = $2",
            )
            .bind(namespace_id)
            .bind(&id.as_bytes()[..]);
            Ok::<_, StoreError>(q.fetch_optional(&pool).await?)
        };
        let row = self.settled(read, |row| settled_if(row.is_some(), row)).await?;
        let (size, media_type, compression, data) = row.ok_or(StoreError::ArtifactNotFound(id))?;
        if compression != "zstd" {
            return Err(StoreError::Corrupt(id));
        }
        let size = usize::try_from(size).map_err(|_| StoreError::Corrupt(id))?;
        let bytes = tokio::task::spawn_blocking(move || zstd::bulk::decompress(&data, size))
            .await
            .map_err(|e| StoreError::Compression(std::io::Error::other(e.to_string())))?
            .map_err(|_| StoreError::Corrupt(id))?;
        if bytes.len() != size || !id.verifies(&bytes) {
            return Err(StoreError::Corrupt(id));
        }
        Ok(Artifact { info: ArtifactRef { id, size: size as u64, media_type }, bytes })
    }
}
