//! The tenant a piece of work acts for: the second wall of tenancy (ADR 008).
//!
//! Every tenant table has a row-level-security policy (`migrations/…_row_level_security.sql`)
//! that shows and accepts only rows of the namespace named by the session setting
//! `memex.tenant` (a namespace id, `*` for every namespace, anything else for none). The store's
//! pools set it on every connection they hand out, from the tenant of the task that asks
//! (`set_config` in the pool's acquire hooks, `Store::connect`): so a query that forgot its
//! `AND namespace_id = $n` still cannot reach another tenant's rows, and a pooled connection never
//! carries a previous caller's tenant.
//!
//! The tenant is a tokio task-local: an RPC runs in a scope that starts at `Deny` and that
//! `Auth::scope` narrows to the caller's namespace; background work (committers, workers,
//! listeners, the CLI's direct-database commands) enters `All` explicitly where it starts.
//! Work outside any scope gets the store's `StoreOptions::unscoped`, `Deny` unless said
//! otherwise, so a forgotten path finds no rows (and fails its tests) instead of seeing them all.
//!
//! A task-local does not follow `tokio::spawn`: a spawned task that works for the caller takes
//! it along with `inherit(current(), …)`.
use std::future::Future;
use std::sync::{Arc, Mutex};

use uuid::Uuid;

/// Whose rows a piece of work may see and write.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Tenant {
    /// None: every tenant table looks empty and refuses every insert.
    Deny,
    /// Every namespace: background work and the admin RPCs that span namespaces.
    All,
    /// One namespace's rows only.
    Namespace(Uuid),
}

impl Tenant {
    /// The value of `memex.tenant` that the policies read for this tenant.
    pub fn setting(self) -> String {
        match self {
            Tenant::Deny => String::new(),
            Tenant::All => "*".to_owned(),
            Tenant::Namespace(id) => id.hyphenated().to_string(),
        }
    }

    /// Whether work for this tenant may touch rows of `namespace_id`.
    pub fn permits(self, namespace_id: Uuid) -> bool {
        match self {
            Tenant::Deny => false,
            Tenant::All => true,
            Tenant::Namespace(id) => id == namespace_id,
        }
    }
}

/// A tenant scope that can be entered more than once and narrowed from inside: an RPC's, which
/// its handler future and, later, its response body are both polled in, and which `set` moves
/// from `Deny` to the caller's namespace once the caller is known.
#[derive(Debug, Clone)]
pub struct TenantScope(Arc<Mutex<Tenant>>);

tokio::task_local! {
    static CURRENT: TenantScope;
}

impl TenantScope {
    pub fn new(tenant: Tenant) -> TenantScope {
        TenantScope(Arc::new(Mutex::new(tenant)))
    }

    /// The tenant the scope holds now.
    pub fn get(&self) -> Tenant {
        // A poisoned lock still holds a valid tenant (a plain Copy value).
        *self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn put(&self, tenant: Tenant) {
        *self.0.lock().unwrap_or_else(|p| p.into_inner()) = tenant;
    }

    /// Runs `f` in this scope.
    pub fn run<F: Future>(self, f: F) -> impl Future<Output = F::Output> {
        CURRENT.scope(self, f)
    }

    /// Runs the synchronous `f` (a poll of a response body) in this scope.
    pub fn run_sync<R>(&self, f: impl FnOnce() -> R) -> R {
        CURRENT.sync_scope(self.clone(), f)
    }
}

/// Runs `f` as `tenant`, in a scope of its own: what `f` narrows stays in it.
pub fn scope<F: Future>(tenant: Tenant, f: F) -> impl Future<Output = F::Output> {
    TenantScope::new(tenant).run(f)
}

/// The tenant of the current task, or None outside any scope.
pub fn current() -> Option<Tenant> {
    CURRENT.try_with(TenantScope::get).ok()
}

/// Runs `f` as `tenant` when there is one, else outside any scope: how a task spawned for the
/// caller keeps the caller's tenant (`tokio::spawn(inherit(current(), f))`, `current()` read in
/// the caller).
pub async fn inherit<F: Future>(tenant: Option<Tenant>, f: F) -> F::Output {
    match tenant {
        Some(t) => scope(t, f).await,
        None => f.await,
    }
}

/// Sets the tenant of the current scope (the caller is now known); false outside any scope,
/// where nothing is changed.
pub fn set(tenant: Tenant) -> bool {
    CURRENT.try_with(|s| s.put(tenant)).is_ok()
}

/// The setting for a connection handed to the current task: its scope's tenant, else `unscoped`.
pub(crate) fn setting_for_current(unscoped: Tenant) -> String {
    current().unwrap_or(unscoped).setting()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_are_what_the_policies_read() {
        let id = Uuid::now_v7();
        assert_eq!(Tenant::Deny.setting(), "");
        assert_eq!(Tenant::All.setting(), "*");
        assert_eq!(Tenant::Namespace(id).setting(), id.hyphenated().to_string());
        assert!(Tenant::All.permits(id) && Tenant::Namespace(id).permits(id));
        assert!(!Tenant::Deny.permits(id) && !Tenant::Namespace(Uuid::now_v7()).permits(id));
    }

    #[tokio::test]
    async fn scopes_nest_narrow_and_end() {
        let id = Uuid::now_v7();
        assert_eq!(current(), None);
        assert!(!set(Tenant::All), "nothing to set outside a scope");
        assert_eq!(current(), None);
        let shared = TenantScope::new(Tenant::Deny);
        shared
            .clone()
            .run(async {
                assert_eq!(current(), Some(Tenant::Deny));
                scope(Tenant::All, async { assert_eq!(current(), Some(Tenant::All)) }).await;
                assert!(set(Tenant::Namespace(id)));
                // A spawned task does not see it unless it inherits it.
                let t = current();
                let (alone, inherited) = (
                    tokio::spawn(async { current() }).await.ok(),
                    tokio::spawn(inherit(t, async { current() })).await.ok(),
                );
                assert_eq!(alone, Some(None));
                assert_eq!(inherited, Some(Some(Tenant::Namespace(id))));
            })
            .await;
        // What the handler narrowed, its response body (polled later, in the same scope) sees.
        assert_eq!(shared.run_sync(current), Some(Tenant::Namespace(id)));
        assert_eq!(setting_for_current(Tenant::Deny), "");
        assert_eq!(setting_for_current(Tenant::All), "*");
    }
}
