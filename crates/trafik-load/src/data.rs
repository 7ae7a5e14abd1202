//! A scenario's data file: rows of named columns that fill `{{row.COLUMN}}`, from CSV (with a
//! header line) or JSON lines (one object a line), read whole before the run starts so a bad
//! row is found before the first request, not in the middle of a test.

use std::path::Path;

/// Every row of a data file; each row has a value for every column.
/// Serializable: a distributed run's coordinator sends the rows to its agents.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Rows {
    pub columns: Vec<String>,
    pub rows: Vec<Vec<String>>,
}

impl Rows {
    /// Reads `path`: JSON lines when it ends in `.jsonl` or `.ndjson`, CSV otherwise. Errors
    /// name the file and, where it applies, the line.
    pub fn read(path: &Path) -> Result<Rows, String> {
        let name = path.display();
        let text = std::fs::read_to_string(path).map_err(|e| format!("cannot read {name}: {e}"))?;
        let json_lines = matches!(
            path.extension().and_then(|e| e.to_str()),
            Some("jsonl" | "ndjson")
        );
        let rows = if json_lines {
            Rows::from_json_lines(&text)
        } else {
            Rows::from_csv(&text)
        }
        .map_err(|e| format!("{name}:{e}"))?;
        if rows.rows.is_empty() {
            return Err(format!("{name}: no rows, and each virtual user takes one"));
        }
        Ok(rows)
    }

    /// CSV with a header line; errors start with the line number.
    pub fn from_csv(text: &str) -> Result<Rows, String> {
        let mut reader = csv::ReaderBuilder::new()
            .trim(csv::Trim::All)
            .from_reader(text.as_bytes());
        let columns: Vec<String> = reader
            .headers()
            .map_err(|e| format!("1: {e}"))?
            .iter()
            .map(str::to_owned)
            .collect();
        let mut rows = Vec::new();
        for record in reader.records() {
            let record = record.map_err(|e| {
                let line = e.position().map_or(0, csv::Position::line);
                format!("{line}: {e}")
            })?;
            rows.push(record.iter().map(str::to_owned).collect());
        }
        Ok(Rows { columns, rows })
    }

    /// One JSON object a line (blank lines skipped); the first object's keys are the columns,
    /// a string is taken as it is and any other value as its JSON text.
    pub fn from_json_lines(text: &str) -> Result<Rows, String> {
        let mut columns: Vec<String> = Vec::new();
        let mut rows = Vec::new();
        for (number, line) in text.lines().enumerate().map(|(i, l)| (i + 1, l)) {
            if line.trim().is_empty() {
                continue;
            }
            let value: serde_json::Value =
                serde_json::from_str(line).map_err(|e| format!("{number}: {e}"))?;
            let serde_json::Value::Object(object) = value else {
                return Err(format!(
                    "{number}: expected a JSON object such as {{\"no\": 1}}"
                ));
            };
            if columns.is_empty() {
                columns = object.keys().cloned().collect();
            }
            let row = columns
                .iter()
                .map(|column| match object.get(column) {
                    Some(serde_json::Value::String(text)) => Ok(text.clone()),
                    Some(other) => Ok(other.to_string()),
                    None => Err(format!(
                        "{number}: no {column:?}, which the first row has; every row needs it"
                    )),
                })
                .collect::<Result<Vec<_>, _>>()?;
            rows.push(row);
        }
        Ok(Rows { columns, rows })
    }

    /// The `n`th row dealt (to a virtual user or an iteration): rows are dealt out in turn and
    /// start over at the end.
    pub fn row(&self, n: u64) -> Option<&[String]> {
        if self.rows.is_empty() {
            return None;
        }
        Some(&self.rows[(n % self.rows.len() as u64) as usize])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn csv_and_json_lines_give_the_same_rows() {
        let csv = Rows::from_csv("kullanici, no\nayse,TR-1\n\"veli, oglu\",TR-2\n").unwrap();
        assert_eq!(csv.columns, ["kullanici", "no"]);
        assert_eq!(csv.rows[1], ["veli, oglu", "TR-2"]);
        let json = Rows::from_json_lines(
            "{\"kullanici\": \"ayse\", \"no\": \"TR-1\"}\n\n{\"no\": \"TR-2\", \"kullanici\": \"veli, oglu\"}\n",
        )
        .unwrap();
        assert_eq!(json, csv);
        assert_eq!(json.row(3).unwrap()[1], "TR-2");
    }

    #[test]
    fn bad_rows_name_their_line() {
        let error = Rows::from_csv("a,b\n1,2\n3\n").unwrap_err();
        assert!(error.starts_with("3: "), "{error}");
        let error = Rows::from_json_lines("{\"a\": 1}\n[1]\n").unwrap_err();
        assert!(error.starts_with("2: expected a JSON object"), "{error}");
        let error = Rows::from_json_lines("{\"a\": 1}\n{\"b\": 2}\n").unwrap_err();
        assert!(error.contains("no \"a\""), "{error}");
        assert_eq!(
            Rows::from_json_lines("{\"a\": 7, \"b\": [1]}")
                .unwrap()
                .rows[0],
            ["7", "[1]"]
        );
    }
}
