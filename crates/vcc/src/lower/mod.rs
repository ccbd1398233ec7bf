//! Lowering and emission: the full, UI, adaptive and transposed views of a [`Chain`].
//!
//! Every view reads the line numbers assigned once by the IR; none renumbers.

mod adaptive;
mod full;
mod transposed;
mod ui;

pub use adaptive::AdaptiveView;
pub use transposed::{TransposedEntry, transposed_view};
pub use ui::{UiOptions, UiPointer, UiPointerKind, UiView};

/// `"\n".join(lines)` built incrementally, counting the lines (list elements).
#[derive(Debug, Default)]
pub(crate) struct LineWriter {
    pub text: String,
    pub lines: u32,
}

impl LineWriter {
    pub fn with_capacity(bytes: usize) -> Self {
        LineWriter { text: String::with_capacity(bytes), lines: 0 }
    }

    /// Appends one line (or several, if `line` is a `\n`-joined body counted as `count`).
    pub fn push_counted(&mut self, line: &str, count: u32) {
        if self.lines > 0 {
            self.text.push('\n');
        }
        self.text.push_str(line);
        self.lines += count;
    }

    pub fn push(&mut self, line: &str) {
        self.push_counted(line, 1);
    }

    /// The 1-based number the next pushed line will have.
    pub fn next_line(&self) -> u32 {
        self.lines + 1
    }
}

/// The reference's `_short`: a file name whose stem is longer than 12 characters becomes
/// `#` + its last 6 characters + extension (`spotter__short.txt` → `#_short.txt`).
pub fn short_name(file: &str) -> String {
    let (stem, ext) = split_ext(file);
    let chars = stem.chars().count();
    if chars > 12 {
        let tail: String = stem.chars().skip(chars - 6).collect();
        format!("#{tail}{ext}")
    } else {
        file.to_string()
    }
}

/// `os.path.splitext` on a bare file name: the last dot, unless only dots precede it.
fn split_ext(file: &str) -> (&str, &str) {
    match file.rfind('.') {
        Some(at) if file[..at].chars().any(|c| c != '.') => (&file[..at], &file[at..]),
        _ => (file, ""),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_names() {
        assert_eq!(short_name("spotter__short.txt"), "#_short.txt");
        assert_eq!(short_name("conversation_2.txt"), "#tion_2.txt");
        assert_eq!(short_name("example.txt"), "example.txt");
        assert_eq!(short_name("abcdefghijkl.txt"), "abcdefghijkl.txt");
        assert_eq!(short_name(".txt"), ".txt");
    }
}
