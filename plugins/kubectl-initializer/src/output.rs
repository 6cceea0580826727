//! Output formats, as kubectl has them: a human table by default, `-o json` and `-o yaml`.

use serde::Serialize;

use crate::error::Error;

/// The `-o` formats.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// Human-readable text (the default).
    #[default]
    Text,
    /// JSON.
    Json,
    /// YAML.
    Yaml,
}

/// `value` as JSON or YAML; `None` for [`Format::Text`] (the caller renders its own text).
pub fn structured<T: Serialize>(format: Format, value: &T) -> Result<Option<String>, Error> {
    match format {
        Format::Text => Ok(None),
        Format::Json => serde_json::to_string_pretty(value)
            .map(|s| Some(s + "\n"))
            .map_err(|e| Error::Output(e.to_string())),
        Format::Yaml => initializer_crds::yaml::to_string(value)
            .map(Some)
            .map_err(|e| Error::Output(e.to_string())),
    }
}

/// Left-aligned columns separated by three spaces, as `kubectl get` prints them.
pub fn columns(header: &[String], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (i, cell) in row.iter().enumerate() {
            if let Some(w) = widths.get_mut(i) {
                *w = (*w).max(cell.chars().count());
            }
        }
    }
    let mut out = String::new();
    for row in std::iter::once(header).chain(rows.iter().map(Vec::as_slice)) {
        let mut line = String::new();
        for (i, cell) in row.iter().enumerate() {
            if i + 1 == row.len() {
                line.push_str(cell);
            } else {
                let width = widths.get(i).copied().unwrap_or_default();
                line.push_str(&format!("{cell:<width$}   "));
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_line_up_under_the_widest_cell() {
        let header = vec!["NAME".to_string(), "PHASE".to_string()];
        let rows = vec![
            vec!["a-long-name".to_string(), "Registered".to_string()],
            vec!["b".to_string(), "Suspended".to_string()],
        ];
        assert_eq!(
            columns(&header, &rows),
            "NAME          PHASE\na-long-name   Registered\nb             Suspended\n"
        );
    }

    #[test]
    fn json_and_yaml_render_and_text_is_left_to_the_caller() {
        let value = serde_json::json!({"a": 1});
        assert_eq!(
            structured(Format::Json, &value).unwrap().unwrap(),
            "{\n  \"a\": 1\n}\n"
        );
        assert_eq!(structured(Format::Yaml, &value).unwrap().unwrap(), "a: 1\n");
        assert_eq!(structured(Format::Text, &value).unwrap(), None);
    }
}
