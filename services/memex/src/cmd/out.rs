//! How client commands print: `--format text` for people, `--format json` for programs.
//!
//! JSON is the canonical protobuf JSON mapping of the answer, with the `.proto` field names
//! (`session_id`, not `sessionId`), every field present, 64-bit integers as numbers and
//! timestamps as RFC 3339: the field names are the API's, so they are as stable as the API.
use std::io::Write;
use std::sync::OnceLock;

use anyhow::Context as _;
use memex_client::{Client, Conn};
use prost_reflect::{DescriptorPool, DynamicMessage, SerializeOptions};

/// Output format of a client command.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// Readable text; pointers as `session:first-last`.
    #[default]
    Text,
    /// One JSON document (JSON lines for streams), with the proto's field names.
    Json,
}

/// The flags every client command takes.
#[derive(clap::Args, Debug, Clone)]
pub struct ClientArgs {
    #[command(flatten)]
    pub conn: Conn,
    /// Output: text (readable) or json (the answer's proto fields, snake_case).
    #[arg(long, value_enum, default_value = "text")]
    pub format: Format,
}

impl ClientArgs {
    pub async fn client(&self) -> anyhow::Result<Client> {
        Ok(self.conn.client().await?)
    }

    pub fn json(&self) -> bool {
        self.format == Format::Json
    }
}

fn pool() -> anyhow::Result<&'static DescriptorPool> {
    static POOL: OnceLock<Result<DescriptorPool, String>> = OnceLock::new();
    POOL.get_or_init(|| DescriptorPool::decode(memex_proto::FILE_DESCRIPTOR_SET).map_err(|e| e.to_string()))
        .as_ref()
        .map_err(|e| anyhow::anyhow!("the embedded descriptor set: {e}"))
}

/// `msg` (a `memex.v1.<name>`) as canonical JSON.
pub fn to_json<M: prost::Message>(msg: &M, name: &str) -> anyhow::Result<serde_json::Value> {
    let desc = pool()?
        .get_message_by_name(&format!("memex.v1.{name}"))
        .with_context(|| format!("no message memex.v1.{name}"))?;
    let dynamic = DynamicMessage::decode(desc, msg.encode_to_vec().as_slice())?;
    let opts =
        SerializeOptions::new().use_proto_field_name(true).skip_default_fields(false).stringify_64_bit_integers(false);
    Ok(dynamic.serialize_with_options(serde_json::value::Serializer, &opts)?)
}

/// A `memex.v1.<name>` read from canonical JSON (proto or camelCase field names).
pub fn from_json<M: prost::Message + Default>(json: &str, name: &str) -> anyhow::Result<M> {
    let desc = pool()?
        .get_message_by_name(&format!("memex.v1.{name}"))
        .with_context(|| format!("no message memex.v1.{name}"))?;
    let mut de = serde_json::Deserializer::from_str(json);
    let dynamic = DynamicMessage::deserialize(desc, &mut de)?;
    de.end()?;
    Ok(dynamic.transcode_to()?)
}

/// Prints one JSON document (or one JSON line) on stdout.
pub fn print_json(v: &serde_json::Value) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    serde_json::to_writer(&mut out, v)?;
    writeln!(out)?;
    out.flush()?;
    Ok(())
}

/// A timestamp as RFC 3339 (UTC, seconds), or `-`.
pub fn time(t: &Option<prost_types::Timestamp>) -> String {
    t.as_ref()
        .and_then(|t| chrono::DateTime::from_timestamp(t.seconds, u32::try_from(t.nanos).ok()?))
        .map_or_else(|| "-".into(), |t| t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true))
}

/// A time given on the command line (RFC 3339) as a request's timestamp.
pub fn timestamp(t: &chrono::DateTime<chrono::Utc>) -> prost_types::Timestamp {
    prost_types::Timestamp { seconds: t.timestamp(), nanos: i32::try_from(t.timestamp_subsec_nanos()).unwrap_or(0) }
}

/// The first line of `text`, cut to `max` characters, for one-line listings.
pub fn one_line(text: &str, max: usize) -> String {
    let line = text.lines().find(|l| !l.trim().is_empty()).unwrap_or("").trim();
    let mut s: String = line.chars().take(max).collect();
    if line.chars().count() > max || text.trim().lines().nth(1).is_some() {
        s.push('…');
    }
    s
}

/// `text` indented by `pad` spaces, line by line.
pub fn indent(text: &str, pad: usize) -> String {
    let pad = " ".repeat(pad);
    text.lines().map(|l| format!("{pad}{l}\n")).collect()
}

/// Proto enum names without their prefix, in lower case (`PHASE_EXECUTION` → `execution`).
pub fn enum_name(full: &str, prefix: &str) -> String {
    full.strip_prefix(prefix).unwrap_or(full).to_ascii_lowercase()
}

#[cfg(test)]
mod tests {
    use super::*;
    use memex_proto::v1 as pb;

    #[test]
    fn json_has_proto_field_names_numbers_and_every_field() {
        let s = pb::Session { id: "s1".into(), event_count: 7, ..Default::default() };
        let v = to_json(&s, "Session").expect("json");
        assert_eq!(v["id"], "s1");
        assert_eq!(v["event_count"], 7);
        assert_eq!(v["agent_id"], "");
        let back: pb::Session = from_json(&v.to_string(), "Session").expect("back");
        assert_eq!(back, s);
    }

    #[test]
    fn one_line_marks_what_it_cut() {
        assert_eq!(one_line("abc", 10), "abc");
        assert_eq!(one_line("\nabcdef\nmore", 3), "abc…");
        assert_eq!(enum_name("PHASE_EXECUTION", "PHASE_"), "execution");
    }
}
