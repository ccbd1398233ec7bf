//! Postgres notifications (LISTEN/NOTIFY): how one replica's change reaches every other at once.
use std::time::Duration;

use crate::Store;

/// What a listener hears.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Heard<'a> {
    /// A notification's payload.
    Payload(&'a str),
    /// The listener has (re)connected: anything sent while it was away was missed.
    Connected,
}

impl Store {
    /// Listens on `channel` until the store closes, calling `on` for each notification and after
    /// each (re)connection; a lost connection is retried every second.
    pub async fn listen(&self, channel: &str, mut on: impl FnMut(Heard<'_>)) {
        loop {
            match sqlx::postgres::PgListener::connect_with(self.listener_pool()).await {
                Ok(mut listener) => match listener.listen(channel).await {
                    Err(e) => tracing::warn!(error = %e, channel, "cannot LISTEN; retrying"),
                    Ok(()) => {
                        on(Heard::Connected);
                        loop {
                            match listener.recv().await {
                                Ok(n) => on(Heard::Payload(n.payload())),
                                Err(e) => {
                                    tracing::warn!(error = %e, channel, "a listener lost its connection; reconnecting");
                                    break;
                                }
                            }
                        }
                    }
                },
                Err(e) => {
                    if !self.pool().is_closed() {
                        tracing::warn!(error = %e, channel, "cannot connect a listener; retrying");
                    }
                }
            }
            if self.pool().is_closed() || self.listener_pool().is_closed() {
                return;
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    }
}
