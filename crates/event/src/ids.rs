//! The ids that cross crates. A namespace, a session and an event are all UUIDs, and a seq is a
//! number; passing them bare let a session id go where a namespace id was meant and still compile.
//! Each is a transparent newtype: free to copy and compare, printed and serialized as the value.

use std::fmt;

use uuid::Uuid;

macro_rules! uuid_id {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default, serde::Serialize, serde::Deserialize)]
        #[serde(transparent)]
        pub struct $name(pub Uuid);

        impl $name {
            pub const fn new(id: Uuid) -> Self {
                $name(id)
            }

            pub const fn uuid(self) -> Uuid {
                self.0
            }
        }

        impl From<Uuid> for $name {
            fn from(id: Uuid) -> Self {
                $name(id)
            }
        }

        impl From<$name> for Uuid {
            fn from(id: $name) -> Uuid {
                id.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                fmt::Display::fmt(&self.0, f)
            }
        }
    };
}

uuid_id!(
    /// A tenant's memory space: every stored row belongs to exactly one.
    NamespaceId
);
uuid_id!(
    /// One agent's trace: its events have gapless seqs from 1.
    SessionId
);
uuid_id!(
    /// One stored event (a UUIDv7, so ids sort by write time).
    EventId
);

/// An event's position in its session: 1-based, gapless, never reused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default, serde::Serialize, serde::Deserialize)]
#[serde(transparent)]
pub struct Seq(pub u64);

impl Seq {
    pub const fn get(self) -> u64 {
        self.0
    }
}

impl From<u64> for Seq {
    fn from(seq: u64) -> Self {
        Seq(seq)
    }
}

impl From<Seq> for u64 {
    fn from(seq: Seq) -> u64 {
        seq.0
    }
}

impl fmt::Display for Seq {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.0, f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_print_and_serialize_as_their_value() {
        let u = Uuid::from_u128(0x0193_0000_0000_7000_8000_0000_0000_0001);
        let s = SessionId(u);
        assert_eq!(s.to_string(), u.to_string());
        assert_eq!(serde_json::to_string(&s).ok(), serde_json::to_string(&u).ok());
        assert_eq!(Seq(17).to_string(), "17");
        assert_eq!(serde_json::to_string(&Seq(17)).ok().as_deref(), Some("17"));
        assert_eq!(Uuid::from(NamespaceId::from(u)), u);
    }
}
