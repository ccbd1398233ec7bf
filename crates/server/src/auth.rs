//! Authentication and namespace scoping. Every memex RPC names a namespace; `Auth::scope` turns
//! that name plus the caller's bearer token into the namespace the call may touch, or a status,
//! and narrows the RPC's tenant (`memex_store::tenant`, `Deny` until then) to that namespace, so
//! every query the call makes afterwards is held to its rows by Postgres too.

use std::sync::Arc;
use std::time::{Duration, Instant};

use memex_store::{Access, ApiKey, Namespace, Store, StoreError, Tenant, tenant};
use tonic::{Request, Status};

use crate::status::store_status;

/// Resolves and checks the namespace of each call. Verified keys and namespaces are cached, so the
/// common path costs no database round trip.
#[derive(Clone)]
pub struct Auth {
    enabled: bool,
    store: Store,
    /// token hash → the live key, or None for an unknown/revoked token.
    keys: moka::future::Cache<[u8; 32], Option<Arc<LiveKey>>>,
    namespaces: moka::future::Cache<String, Namespace>,
}

impl Auth {
    pub fn new(store: Store, enabled: bool, key_ttl: Duration) -> Auth {
        Auth {
            enabled,
            store,
            keys: moka::future::Cache::builder().max_capacity(100_000).time_to_live(key_ttl).build(),
            // Namespaces are never renamed or deleted, so a found one can be kept.
            namespaces: moka::future::Cache::builder().max_capacity(100_000).build(),
        }
    }

    /// Forgets every verified key whenever a key is revoked or expires early on any replica (the
    /// `memex_keys` notification, sent by a trigger on `api_keys`), and whenever the listener
    /// (re)connects, since a revocation may have been missed meanwhile. So a revocation takes
    /// effect at once everywhere; `auth.key_cache_ttl_secs` bounds it only while the listener
    /// cannot reach the database. Runs until the store closes.
    pub async fn listen_for_revocations(&self) {
        self.store
            .listen("memex_keys", |_| {
                self.keys.invalidate_all();
            })
            .await;
    }

    /// Who is calling, for an audit record: the API key's id and name, or that auth is off.
    pub async fn caller<T>(&self, req: &Request<T>) -> String {
        if !self.enabled {
            return "anonymous (authentication off)".to_owned();
        }
        match bearer_token(req) {
            Ok(token) => match self.key(token).await {
                Ok(k) => format!("api key {} ({})", k.key.id, k.key.name),
                Err(_) => "unknown key".to_owned(),
            },
            Err(_) => "no key".to_owned(),
        }
    }

    pub fn enabled(&self) -> bool {
        self.enabled
    }

    /// The namespace `name` if the caller may act on it with `need`; otherwise
    /// `INVALID_ARGUMENT` (no name), `UNAUTHENTICATED` (no or bad token), `PERMISSION_DENIED`
    /// (another namespace's key, or too few rights) or `NOT_FOUND` (no such namespace, auth off).
    /// On success the RPC's tenant is that namespace from here on.
    pub async fn scope<T>(&self, req: &Request<T>, name: &str, need: Access) -> Result<Namespace, Status> {
        let ns = self.authorize(req, name, need).await?;
        tenant::set(Tenant::Namespace(ns.id));
        Ok(ns)
    }

    async fn authorize<T>(&self, req: &Request<T>, name: &str, need: Access) -> Result<Namespace, Status> {
        if name.is_empty() {
            return Err(Status::invalid_argument("namespace: is required"));
        }
        crate::rpc::record_namespace(name);
        if !self.enabled {
            return self.namespace(name).await;
        }
        let token = bearer_token(req)?;
        let live = self.key(token).await?;
        let key = &live.key;
        if key.namespace.name != name {
            return Err(Status::permission_denied(format!(
                "namespace: this API key belongs to namespace {:?}, not {name:?}",
                key.namespace.name
            )));
        }
        if key.access < need {
            return Err(Status::permission_denied(format!(
                "this API key has {} access; this call needs {}",
                key.access.as_str(),
                need.as_str()
            )));
        }
        Ok(key.namespace.clone())
    }

    async fn namespace(&self, name: &str) -> Result<Namespace, Status> {
        if let Some(ns) = self.namespaces.get(name).await {
            return Ok(ns);
        }
        // Authentication off: the name is all there is to go by, and no tenant is known yet.
        let ns = tenant::scope(Tenant::All, self.store.namespace(name)).await.map_err(|e| store_status(&e))?;
        self.namespaces.insert(name.to_owned(), ns.clone()).await;
        Ok(ns)
    }

    async fn key(&self, token: &str) -> Result<Arc<LiveKey>, Status> {
        let hash = memex_store::token_hash(token);
        let store = self.store.clone();
        let token = token.to_owned();
        let found = self
            .keys
            // Authentication finds the key by its hash alone, before any tenant is known: it is
            // what tells which namespace the caller is.
            .try_get_with(hash, async move {
                let asked = Instant::now();
                let found = tenant::scope(Tenant::All, store.authenticate(&token)).await?;
                Ok::<_, StoreError>(
                    found.map(|a| Arc::new(LiveKey { key: a.key, until: a.expires_in.map(|left| asked + left) })),
                )
            })
            .await
            .map_err(|e: Arc<StoreError>| store_status(&e))?;
        // A cached key may have expired since (a rotation's overlap ended).
        found
            .filter(|k| k.until.is_none_or(|t| Instant::now() < t))
            .ok_or_else(|| Status::unauthenticated("the API key is not valid (unknown, revoked or expired)"))
    }
}

/// A verified key and, if a rotation gave it an end, the instant of this process's monotonic
/// clock when it ends: the database's time left, counted down here, so a replica's wall clock
/// plays no part.
struct LiveKey {
    key: ApiKey,
    until: Option<Instant>,
}

fn bearer_token<T>(req: &Request<T>) -> Result<&str, Status> {
    let value = req
        .metadata()
        .get("authorization")
        .ok_or_else(|| Status::unauthenticated("missing API key: send metadata \"authorization: Bearer <token>\""))?;
    let text =
        value.to_str().map_err(|_| Status::unauthenticated("the authorization metadata is not printable ASCII"))?;
    let (scheme, token) = text
        .split_once(' ')
        .ok_or_else(|| Status::unauthenticated("the authorization metadata must be \"Bearer <token>\""))?;
    if !scheme.eq_ignore_ascii_case("bearer") || token.trim().is_empty() {
        return Err(Status::unauthenticated("the authorization metadata must be \"Bearer <token>\""));
    }
    Ok(token.trim())
}
