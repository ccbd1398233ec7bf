//! Tool calls: the parameter text of the full view and the UI view's one-line summary.

use crate::json::{Object, Value};
use crate::pyfmt::py_str;

/// The reference's hand-written emitter (`_emit_dict`): YAML-like, values printed with Python's
/// `str()`, multi-line strings as `key: |` blocks whose empty lines stay truly empty, nested
/// lists printed as Python lists. A non-object input (the reference crashes) prints as `str()`.
pub(crate) fn emit_params(input: &Value<'_>) -> String {
    let mut out = Parts::default();
    match input {
        Value::Object(obj) => emit_dict(obj, 0, &mut out),
        other => {
            let mut s = String::new();
            py_str(other, &mut s);
            out.push(&s);
        }
    }
    out.text
}

/// `"\n".join(parts)` built incrementally.
#[derive(Default)]
struct Parts {
    text: String,
    any: bool,
}

impl Parts {
    fn start(&mut self) -> &mut String {
        if self.any {
            self.text.push('\n');
        }
        self.any = true;
        &mut self.text
    }

    fn push(&mut self, part: &str) {
        self.start().push_str(part);
    }

    fn push_prefixed(&mut self, indent: usize, parts: &[&str]) {
        let out = self.start();
        out.extend(std::iter::repeat_n(' ', indent));
        for p in parts {
            out.push_str(p);
        }
    }
}

fn emit_dict(obj: &Object<'_>, indent: usize, out: &mut Parts) {
    for (key, value) in obj.iter_py() {
        match value {
            Value::Object(child) => {
                out.push_prefixed(indent, &[key, ":"]);
                if child.entries.is_empty() {
                    out.push("");
                } else {
                    emit_dict(child, indent + 2, out);
                }
            }
            Value::Array(items) => {
                out.push_prefixed(indent, &[key, ":"]);
                for item in items {
                    emit_list_item(item, indent, out);
                }
            }
            scalar => emit_scalar(key, scalar, indent, out),
        }
    }
}

fn emit_list_item(item: &Value<'_>, indent: usize, out: &mut Parts) {
    match item {
        Value::Object(child) => {
            out.push_prefixed(indent, &["  -"]);
            if child.entries.is_empty() {
                out.push("");
            } else {
                emit_dict(child, indent + 4, out);
            }
        }
        other => {
            let line = out.start();
            line.extend(std::iter::repeat_n(' ', indent));
            line.push_str("  - ");
            py_str(other, line);
        }
    }
}

fn emit_scalar(key: &str, value: &Value<'_>, indent: usize, out: &mut Parts) {
    let mut s = String::new();
    py_str(value, &mut s);
    if !s.contains('\n') {
        out.push_prefixed(indent, &[key, ": ", &s]);
        return;
    }
    out.push_prefixed(indent, &[key, ": |"]);
    for line in s.split('\n') {
        if line.is_empty() {
            out.push("");
        } else {
            out.push_prefixed(indent + 2, &[line]);
        }
    }
}

/// The UI view's `* Name "value"` line (pointers are appended by the UI lowering).
pub(crate) fn tool_summary(name: &str, input: &Value<'_>) -> String {
    let field = match name {
        "Read" | "Edit" | "Write" => Some("file_path"),
        "Glob" | "Grep" => Some("pattern"),
        "Agent" => Some("description"),
        "Skill" => Some("skill"),
        _ => None,
    };
    let Some(obj) = input.as_object() else {
        return format!("* {name}");
    };
    if let Some(v) = field.and_then(|f| obj.get(f)) {
        return quoted(name, v);
    }
    if name == "Bash"
        && let Some(summary) = bash_summary(obj)
    {
        return summary;
    }
    format!("* {name}")
}

fn quoted(name: &str, v: &Value<'_>) -> String {
    let mut s = format!("* {name} \"");
    py_str(v, &mut s);
    s.push('"');
    s
}

/// `description or command`, a long command cut to 57 characters + `...`.
fn bash_summary(obj: &Object<'_>) -> Option<String> {
    let description = obj.get("description").filter(|d| d.truthy());
    let val = description.or_else(|| obj.get("command"))?;
    if !val.truthy() {
        return None;
    }
    if description.is_none()
        && let Value::Str(cmd) = val
        && cmd.chars().count() > 60
    {
        let cut: String = cmd.chars().take(57).collect();
        return Some(format!("* Bash \"{cut}...\""));
    }
    Some(quoted("Bash", val))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::json::{Schema, parse_document};

    fn params(json: &str) -> String {
        emit_params(&parse_document(json, Schema::Full).unwrap().0)
    }

    #[test]
    fn reference_example() {
        let got = params(
            r#"{"file_path":"a.py","content":"x=1\n\ny=2\n","opts":{"a":true,"d":{}},"lst":[1,{"k":"v"},[3,4]]}"#,
        );
        let want = "file_path: a.py\ncontent: |\n  x=1\n\n  y=2\n\nopts:\n  a: True\n  d:\n\nlst:\n  - 1\n  -\n    k: v\n  - [3, 4]";
        assert_eq!(got, want);
    }

    #[test]
    fn list_strings_with_newlines_are_raw() {
        assert_eq!(params(r#"{"l":["a\nb"],"e":[]}"#), "l:\n  - a\nb\ne:");
    }

    #[test]
    fn summaries() {
        fn v(s: &str) -> Value<'_> {
            parse_document(s, Schema::Full).unwrap().0
        }
        assert_eq!(tool_summary("Read", &v(r#"{"file_path":"/x"}"#)), "* Read \"/x\"");
        assert_eq!(tool_summary("Task", &v(r#"{"description":"d"}"#)), "* Task");
        assert_eq!(tool_summary("Bash", &v(r#"{"command":"ls","description":""}"#)), "* Bash \"ls\"");
        let long = format!(r#"{{"command":"{}"}}"#, "x".repeat(61));
        assert_eq!(tool_summary("Bash", &v(&long)), format!("* Bash \"{}...\"", "x".repeat(57)));
        assert_eq!(tool_summary("Bash", &v(r#"{}"#)), "* Bash");
    }
}
