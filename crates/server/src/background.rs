//! Background work (the embedding workers) on a runtime of its own whose threads the kernel runs
//! only when nothing else wants a CPU (SCHED_IDLE), with a small database pool of its own. On a
//! two-core machine an embedding backlog otherwise takes the cores from the requests: the workers
//! step aside between batches, but a batch in hand held a core for up to a second.
use std::future::Future;

use memex_store::{Store, StoreOptions};
use thread_priority::{NormalThreadSchedulePolicy, ThreadPriority, ThreadSchedulePolicy};
use tokio::runtime::{Builder, Handle, Runtime};

use crate::config::Config;

/// Connections the background work may hold (the requests keep the rest of the pool).
const POOL: u32 = 4;

pub struct Background {
    rt: Option<Runtime>,
    /// The metrics of the pools made here (`db.client.connection.*{pool.name = "background"}`).
    observers: std::sync::Mutex<Vec<crate::metrics::Observer>>,
}

impl Background {
    pub fn start() -> std::io::Result<Background> {
        let rt = Builder::new_multi_thread()
            .worker_threads(1)
            .max_blocking_threads(2)
            .thread_name("memex-background")
            .enable_all()
            .on_thread_start(|| {
                let idle = ThreadSchedulePolicy::Normal(NormalThreadSchedulePolicy::Idle);
                let me = thread_priority::thread_native_id();
                if let Err(e) = thread_priority::set_thread_priority_and_policy(me, ThreadPriority::Min, idle) {
                    tracing::warn!(error = ?e, "background thread runs at normal priority");
                }
            })
            .build()?;
        Ok(Background { rt: Some(rt), observers: Default::default() })
    }

    fn handle(&self) -> Option<Handle> {
        self.rt.as_ref().map(|rt| rt.handle().clone())
    }

    /// Runs `make` on the background runtime, with a store of its own, and waits for its answer.
    pub async fn run<T, F, Fut>(&self, config: &Config, make: F) -> Result<T, crate::ServerError>
    where
        T: Send + 'static,
        F: FnOnce(Store) -> Fut + Send + 'static,
        Fut: Future<Output = Result<T, crate::ServerError>> + Send + 'static,
    {
        let Some(handle) = self.handle() else {
            return Err(crate::ServerError::Background("the background runtime is stopped".into()));
        };
        let opts = StoreOptions {
            max_connections: POOL,
            min_connections: 0,
            acquire_timeout: std::time::Duration::from_secs(config.database.acquire_timeout_secs),
            group_commit: None,
            standby_url: crate::standby_url(config),
            unscoped: memex_store::Tenant::Deny,
        };
        let url = config.database.url.clone();
        // Background work is every namespace's: it starts as `Tenant::All` (the tasks it spawns
        // enter it again where they start).
        let (made, pool) = handle
            .spawn(memex_store::tenant::scope(memex_store::Tenant::All, async move {
                let store = Store::connect(&url, &opts).await?;
                let pool = store.pool().clone();
                make(store).await.map(|made| (made, pool))
            }))
            .await
            .map_err(|e| crate::ServerError::Background(e.to_string()))??;
        if let Ok(mut observers) = self.observers.lock() {
            observers.extend(crate::metrics::pool_metrics("background", &pool));
        }
        Ok(made)
    }
}

impl Drop for Background {
    fn drop(&mut self) {
        // Whatever still runs there is abandoned (an inference in hand), never waited for.
        if let Some(rt) = self.rt.take() {
            rt.shutdown_background();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use thread_priority::ThreadSchedulePolicy;

    fn policy() -> Option<ThreadSchedulePolicy> {
        thread_priority::unix::thread_schedule_policy().ok()
    }

    /// The workers' tasks and their blocking work (an inference) run at SCHED_IDLE; the caller's
    /// threads do not.
    #[tokio::test]
    async fn background_threads_run_only_when_the_cpu_is_idle() {
        let idle = Some(ThreadSchedulePolicy::Normal(NormalThreadSchedulePolicy::Idle));
        let bg = Background::start().expect("a runtime");
        let handle = bg.handle().expect("running");
        let (task, blocking) = handle
            .spawn(async { (policy(), tokio::task::spawn_blocking(policy).await.expect("blocking task")) })
            .await
            .expect("task");
        assert_eq!(task, idle);
        assert_eq!(blocking, idle);
        assert_ne!(policy(), idle, "the caller keeps its priority");
    }
}
