//! The gRPC services: each handler checks the request, resolves its namespace through `Auth`,
//! calls the store and converts the answer. Decisions live in `memex-event` and `memex-store`.
pub mod admin;
pub mod context;
pub mod events;
pub mod memory;
pub mod search;
pub mod sessions;
pub mod views;
