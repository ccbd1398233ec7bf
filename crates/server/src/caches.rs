//! How full the replica's in-process caches are: gauges for the metrics, and a log line a
//! minute at debug level (target `memex_server::caches`) for runs without an exporter, such as
//! `memex-bench soak`, which reads it to tell caches filling to their bounds from a leak.
use std::sync::Arc;
use std::time::Duration;

use memex_store::CacheSize;

use crate::state::AppState;

/// Every cache of the replica: the compiled views and the context engine's.
pub fn sizes(state: &AppState) -> Vec<CacheSize> {
    let mut all = state.views.cache_sizes();
    all.extend(state.context.cache_sizes());
    all
}

/// The sizes as one JSON object: name → [entries, weight, capacity, unit].
pub fn to_json(sizes: &[CacheSize]) -> String {
    let map: serde_json::Map<String, serde_json::Value> = sizes
        .iter()
        .map(|c| (c.name.to_string(), serde_json::json!([c.entries, c.weight, c.capacity, c.unit.as_str()])))
        .collect();
    serde_json::Value::Object(map).to_string()
}

/// Logs the sizes every `every` while debug logging is on for this module.
pub async fn log(state: Arc<AppState>, every: Duration) {
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        if tracing::enabled!(tracing::Level::DEBUG) {
            tracing::debug!(caches = %to_json(&sizes(&state)), "cache sizes");
        }
    }
}

#[cfg(test)]
mod tests {
    use memex_store::{CacheSize, CacheUnit};

    #[test]
    fn sizes_log_as_one_json_object_by_name() {
        let sizes = [
            CacheSize { name: "views.compiled", entries: 3, weight: 2048, capacity: 4096, unit: CacheUnit::Bytes },
            CacheSize { name: "context.premises", entries: 5, weight: 5, capacity: 100, unit: CacheUnit::Entries },
        ];
        // The layout `memex-bench soak` reads back (soak_server.rs).
        assert_eq!(
            super::to_json(&sizes),
            r#"{"context.premises":[5,5,100,"entries"],"views.compiled":[3,2048,4096,"bytes"]}"#
        );
    }
}
