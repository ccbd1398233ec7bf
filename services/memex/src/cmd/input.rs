//! Trace input for `memex view` and `memex import`: a file or `-` (stdin), gzip'd or not. gzip
//! is recognised by its magic bytes (1f 8b), not by the name, so `t.jsonl.gz`, a renamed file
//! and a compressed pipe all read as the trace they hold.
use std::io::{Cursor, Read};

/// One opened trace.
pub struct TraceInput {
    /// The decompressed bytes, as they are read.
    pub reader: Box<dyn Read + Send>,
    /// The name its views are named after: the file's name without a `.gz`; `stdin.jsonl` for `-`.
    pub name: String,
}

const GZIP_MAGIC: [u8; 2] = [0x1f, 0x8b];

/// Opens `path` (`-`: stdin).
pub fn open(path: &str) -> std::io::Result<TraceInput> {
    let (raw, name): (Box<dyn Read + Send>, String) = if path == "-" {
        (Box::new(std::io::stdin()), "stdin.jsonl".into())
    } else {
        let file_name = std::path::Path::new(path).file_name().map(|n| n.to_string_lossy().into_owned());
        (Box::new(std::fs::File::open(path)?), file_name.unwrap_or_else(|| path.to_owned()))
    };
    sniff(raw, name)
}

/// Reads the first two bytes to tell gzip from plain, then gives them back in front of the rest.
fn sniff(mut raw: Box<dyn Read + Send>, name: String) -> std::io::Result<TraceInput> {
    let mut head = Vec::with_capacity(2);
    (&mut raw).take(2).read_to_end(&mut head)?;
    if head.len() == 1 {
        // A read may return one byte at a time (pipes); get the second if there is one.
        (&mut raw).take(1).read_to_end(&mut head)?;
    }
    let gzip = head == GZIP_MAGIC;
    let whole = Cursor::new(head).chain(raw);
    if gzip {
        let name = name.strip_suffix(".gz").map_or(name.clone(), str::to_owned);
        // Multi-member: `cat a.gz b.gz` is one valid gzip stream of both.
        Ok(TraceInput { reader: Box::new(flate2::read::MultiGzDecoder::new(whole)), name })
    } else {
        Ok(TraceInput { reader: Box::new(whole), name })
    }
}

/// The whole trace, decompressed, and the name its views are named after.
pub fn read_all(path: &str) -> anyhow::Result<(String, Vec<u8>)> {
    use anyhow::Context as _;
    let mut input = open(path).with_context(|| format!("cannot open {path}"))?;
    let mut bytes = Vec::new();
    input.reader.read_to_end(&mut bytes).with_context(|| format!("cannot read {path}"))?;
    Ok((input.name, bytes))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write as _;

    fn gz(bytes: &[u8]) -> Vec<u8> {
        let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        e.write_all(bytes).expect("compress");
        e.finish().expect("compress")
    }

    fn read(input: TraceInput) -> Vec<u8> {
        let mut out = Vec::new();
        let mut r = input.reader;
        r.read_to_end(&mut out).expect("read");
        out
    }

    #[test]
    fn gzip_is_told_by_its_magic_not_its_name() {
        let plain = b"{\"type\":\"user\"}\n".to_vec();
        let t = sniff(Box::new(Cursor::new(gz(&plain))), "t.jsonl.gz".into()).expect("open");
        assert_eq!(t.name, "t.jsonl");
        assert_eq!(read(t), plain);
        let t = sniff(Box::new(Cursor::new(gz(&plain))), "renamed.jsonl".into()).expect("open");
        assert_eq!(t.name, "renamed.jsonl");
        assert_eq!(read(t), plain);
        let t = sniff(Box::new(Cursor::new(plain.clone())), "p.jsonl.gz".into()).expect("open");
        assert_eq!(t.name, "p.jsonl.gz", "not gzip: the name stays");
        assert_eq!(read(t), plain);
    }

    #[test]
    fn concatenated_members_and_tiny_inputs_read_whole() {
        let mut two = gz(b"a\n");
        two.extend(gz(b"b\n"));
        assert_eq!(read(sniff(Box::new(Cursor::new(two)), "x".into()).expect("open")), b"a\nb\n");
        for tiny in [&b""[..], b"{"] {
            assert_eq!(read(sniff(Box::new(Cursor::new(tiny.to_vec())), "x".into()).expect("open")), tiny);
        }
    }
}
