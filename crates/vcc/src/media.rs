//! Base64 media blocks: Python's lenient `base64.b64decode` and the reference's file naming.

/// Images or documents; they share one counter per chain.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum MediaKind {
    Image,
    Document,
}

impl MediaKind {
    pub fn stem(self) -> &'static str {
        match self {
            MediaKind::Image => "img",
            MediaKind::Document => "doc",
        }
    }
    pub fn default_ext(self) -> &'static str {
        match self {
            MediaKind::Image => "png",
            MediaKind::Document => "bin",
        }
    }
    pub fn label(self) -> &'static str {
        match self {
            MediaKind::Image => "image",
            MediaKind::Document => "document",
        }
    }
}

/// The reference's `_media_ext`: the subtype of `type/subtype+suffix`, `jpeg` → `jpg`.
pub(crate) fn media_ext(media_type: &str, kind: MediaKind) -> String {
    let Some((_, sub)) = media_type.split_once('/') else {
        return kind.default_ext().into();
    };
    let ext = sub.split_once('+').map_or(sub, |(e, _)| e);
    match ext {
        "jpeg" => "jpg".into(),
        "" => kind.default_ext().into(),
        e => e.into(),
    }
}

/// Why a base64 payload could not be decoded (Python raises `binascii.Error`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Base64Error {
    NonAscii,
    /// One data character past a multiple of four.
    ExcessData(usize),
    IncorrectPadding,
}

impl std::fmt::Display for Base64Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Base64Error::NonAscii => {
                write!(f, "string argument should contain only ASCII characters")
            }
            Base64Error::ExcessData(n) => {
                write!(f, "number of data characters ({n}) cannot be 1 more than a multiple of 4")
            }
            Base64Error::IncorrectPadding => write!(f, "Incorrect padding"),
        }
    }
}

/// CPython's non-strict `a2b_base64`: characters outside the alphabet are skipped, decoding
/// stops at the first complete padding, and a dangling partial quantum is an error.
pub(crate) fn b64decode(data: &str) -> Result<Vec<u8>, Base64Error> {
    if !data.is_ascii() {
        return Err(Base64Error::NonAscii);
    }
    let bytes = data.as_bytes();
    let mut out = Vec::with_capacity(bytes.len() / 4 * 3);
    let fast = decode_clean_quads(bytes, &mut out);
    let (mut quad, mut left, mut pads, mut chars) = (0u8, 0u32, 0u8, fast);
    for &c in &bytes[fast..] {
        if c == b'=' {
            if quad >= 2 {
                pads += 1;
                if quad + pads >= 4 {
                    return Ok(out);
                }
            }
            continue;
        }
        let Some(v) = sextet(c) else { continue };
        chars += 1;
        pads = 0;
        match quad {
            0 => {
                left = v;
                quad = 1;
            }
            1 => {
                out.push(((left << 2) | (v >> 4)) as u8);
                left = v & 0x0f;
                quad = 2;
            }
            2 => {
                out.push(((left << 4) | (v >> 2)) as u8);
                left = v & 0x03;
                quad = 3;
            }
            _ => {
                out.push(((left << 6) | v) as u8);
                quad = 0;
            }
        }
    }
    match quad {
        0 => Ok(out),
        1 => Err(Base64Error::ExcessData(chars)),
        _ => Err(Base64Error::IncorrectPadding),
    }
}

/// Decodes leading groups of four alphabet characters (the common case, no padding or line
/// breaks yet); returns how many input bytes were consumed, always a multiple of four.
fn decode_clean_quads(bytes: &[u8], out: &mut Vec<u8>) -> usize {
    const TABLE: [u8; 256] = {
        let mut t = [0xffu8; 256];
        let mut i = 0;
        while i < 256 {
            let c = i as u8;
            t[i] = match c {
                b'A'..=b'Z' => c - b'A',
                b'a'..=b'z' => c - b'a' + 26,
                b'0'..=b'9' => c - b'0' + 52,
                b'+' => 62,
                b'/' => 63,
                _ => 0xff,
            };
            i += 1;
        }
        t
    };
    let mut done = 0;
    for quad in bytes.chunks_exact(4) {
        let [a, b, c, d] =
            [TABLE[quad[0] as usize], TABLE[quad[1] as usize], TABLE[quad[2] as usize], TABLE[quad[3] as usize]];
        if (a | b | c | d) & 0xc0 != 0 {
            break;
        }
        let n = (u32::from(a) << 18) | (u32::from(b) << 12) | (u32::from(c) << 6) | u32::from(d);
        out.extend_from_slice(&[(n >> 16) as u8, (n >> 8) as u8, n as u8]);
        done += 4;
    }
    done
}

fn sextet(c: u8) -> Option<u32> {
    match c {
        b'A'..=b'Z' => Some(u32::from(c - b'A')),
        b'a'..=b'z' => Some(u32::from(c - b'a') + 26),
        b'0'..=b'9' => Some(u32::from(c - b'0') + 52),
        b'+' => Some(62),
        b'/' => Some(63),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn decodes_like_python() {
        assert_eq!(b64decode("aGVsbG8=").unwrap(), b"hello");
        assert_eq!(b64decode("aGVs\nbG8=").unwrap(), b"hello");
        assert_eq!(b64decode("aGVsbG8=trailing").unwrap(), b"hello");
        assert_eq!(b64decode("").unwrap(), b"");
        assert_eq!(b64decode("aGVsbG8").unwrap_err(), Base64Error::IncorrectPadding);
        assert_eq!(b64decode("aGVsb").unwrap_err(), Base64Error::ExcessData(5));
        assert_eq!(b64decode("é").unwrap_err(), Base64Error::NonAscii);
    }

    #[test]
    fn extensions() {
        assert_eq!(media_ext("image/jpeg", MediaKind::Image), "jpg");
        assert_eq!(media_ext("image/svg+xml", MediaKind::Image), "svg");
        assert_eq!(media_ext("png", MediaKind::Image), "png");
        assert_eq!(media_ext("application/", MediaKind::Document), "bin");
        assert_eq!(media_ext("application/pdf", MediaKind::Document), "pdf");
    }
}
