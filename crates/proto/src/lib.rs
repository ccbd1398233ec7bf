//! The `memex.v1` gRPC API: generated messages, clients and servers, and the file descriptor set
//! that server reflection publishes.
//!
//! **Architecture invariant:** this crate holds compiled `.proto` code and transport glue only;
//! conversions between wire and domain types live with the service, not here.

pub mod codec;

#[allow(clippy::all, clippy::pedantic, clippy::unwrap_used)]
pub mod v1 {
    tonic::include_proto!("memex.v1");
}

/// The encoded `FileDescriptorSet` of every memex proto, for `tonic-reflection`.
pub const FILE_DESCRIPTOR_SET: &[u8] = tonic::include_file_descriptor_set!("memex_descriptor");
