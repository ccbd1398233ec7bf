//! Scratch directories that go when the test is done with them.
use std::path::{Path, PathBuf};

/// A fresh, empty directory under the system's temp dir, removed when dropped (also when the test
/// panics), so that test runs do not leave their files behind.
#[derive(Debug)]
pub struct Scratch(PathBuf);

impl Scratch {
    /// `<temp>/<name>`, emptied first if an earlier run left it there. Name it with the process
    /// id (and whatever else tells concurrent tests apart).
    pub fn new(name: &str) -> Scratch {
        let dir = std::env::temp_dir().join(name);
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("create a scratch directory");
        Scratch(dir)
    }
}

impl std::ops::Deref for Scratch {
    type Target = Path;
    fn deref(&self) -> &Path {
        &self.0
    }
}

impl AsRef<Path> for Scratch {
    fn as_ref(&self) -> &Path {
        &self.0
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_scratch_dir_is_empty_at_first_and_gone_after() {
        let name = format!("memex-scratch-test-{}", std::process::id());
        let path = {
            let first = Scratch::new(&name);
            std::fs::write(first.join("left"), b"x").unwrap();
            let again = Scratch::new(&name);
            assert!(!again.join("left").exists(), "an earlier run's files are removed");
            std::mem::forget(first);
            again.to_path_buf()
        };
        assert!(!path.exists());
    }
}
