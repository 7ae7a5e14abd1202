//! The README's "every key and its default" listing, held to the schema so the two cannot drift:
//! every table lists exactly the keys the schema accepts there, and every listed value is the
//! default unless its comment says otherwise (`default: …`, `required`, `optional`).

use std::collections::{BTreeMap, BTreeSet};
use std::ops::Range;

use toml::de::{DeTable, DeValue};

use super::{ConfigError, Loaded, load};

/// The key serde cannot know; each table's "unknown field" error then lists the table's keys.
const PROBE: &str = "zzz_probe";

fn listing() -> String {
    let readme = include_str!("../../../../README.md");
    let start = readme
        .find("every key and its default")
        .expect("the README's listing");
    let block = &readme[start..];
    let open = block.find("```toml\n").expect("a toml block") + "```toml\n".len();
    let close = block[open..].find("```").expect("the block's end");
    block[open..open + close].to_owned()
}

/// Loads the listing as if it were the README itself, so the files it names resolve from the
/// repository's root.
fn load_listing(text: &str) -> Result<Loaded, Vec<ConfigError>> {
    load(
        concat!(env!("CARGO_MANIFEST_DIR"), "/../../README.md"),
        text,
    )
}

/// What a load resolved to, comparable across loads.
fn resolved(text: &str) -> Result<String, Vec<ConfigError>> {
    load_listing(text).map(|loaded| format!("{loaded:?}"))
}

#[test]
fn the_readme_lists_every_key_of_every_table() {
    let text = listing();
    // A probe key at the top and after each table header.
    let mut probed = format!("{PROBE} = 0\n");
    let mut tables = 1;
    for line in text.lines() {
        probed.push_str(line);
        probed.push('\n');
        if line.starts_with('[') {
            probed.push_str(&format!("{PROBE} = 0\n"));
            tables += 1;
        }
    }
    let errors = load_listing(&probed).expect_err("every probe is refused");
    assert_eq!(errors.len(), tables, "one error per table: {errors:#?}");
    let (document, _) = DeTable::parse_recoverable(&text);
    // Tables of one array (`[[listener]]`) are of one kind: a kind's keys may be spread over
    // its tables, so an http and a tcp listener each list only the keys that apply to them.
    let mut kinds: BTreeMap<String, (BTreeSet<&str>, BTreeSet<&str>)> = BTreeMap::new();
    for error in &errors {
        let table_path = error
            .field
            .strip_suffix(PROBE)
            .unwrap_or_else(|| panic!("not a probe error: {error}"));
        let kind = table_path
            .split('[')
            .map(|part| part.split_once(']').map_or(part, |(_, rest)| rest))
            .collect::<Vec<_>>()
            .join("[]");
        let (schema_keys, listed) = kinds.entry(kind).or_default();
        schema_keys.extend(error.message.split('`').skip(3).step_by(2));
        listed.extend(
            table_at(document.get_ref(), table_path)
                .keys()
                .map(|k| k.get_ref().as_ref()),
        );
    }
    for (kind, (schema_keys, listed)) in kinds {
        assert_eq!(
            listed, schema_keys,
            "README listing vs schema in the tables `{kind}`"
        );
    }
}

#[test]
fn every_value_in_the_readme_listing_is_the_default_it_claims() {
    let text = listing();
    let full = resolved(&text).expect("the README listing is a valid config");
    let (document, _) = DeTable::parse_recoverable(&text);
    let mut leaves = Vec::new();
    collect_leaves(document.get_ref(), "", &mut leaves);
    assert!(leaves.len() > 40, "{} keys found", leaves.len());
    for leaf in leaves {
        let line_start = text[..leaf.key.start].rfind('\n').map_or(0, |i| i + 1);
        let line_end = text[line_start..]
            .find('\n')
            .map_or(text.len(), |i| line_start + i);
        let comment = text[line_start..line_end]
            .split_once('#')
            .map_or("", |(_, c)| c);
        let without = format!("{}{}", &text[..leaf.key.start], &text[leaf.value.end..]);
        let absent = resolved(&without);
        let path = &leaf.path;
        if comment.contains("required") {
            let errors = absent.expect_err(&format!("{path} is listed as required"));
            assert!(
                errors.iter().any(|e| e.message.starts_with("missing `")),
                "{path}: {errors:?}"
            );
        } else if comment.contains("optional") {
            absent.unwrap_or_else(|e| panic!("{path} is listed as optional: {e:?}"));
        } else if let Some(stated) = stated_default(comment) {
            let with_stated = format!(
                "{}{stated}{}",
                &text[..leaf.value.start],
                &text[leaf.value.end..]
            );
            assert_eq!(
                resolved(&with_stated),
                absent,
                "{path}: the default is not {stated}"
            );
        } else if !comment.contains("default:") {
            assert_eq!(
                absent.as_ref(),
                Ok(&full),
                "{path}: the listed value is not the default"
            );
        }
    }
}

/// The value after `default:` when it is one TOML value (`"/"`, `[]`); `None` when the default
/// is told in words ("one per core").
fn stated_default(comment: &str) -> Option<&str> {
    let (_, after) = comment.split_once("default: ")?;
    let value = after.split(';').next()?.trim();
    DeValue::parse(value).is_ok().then_some(value)
}

struct Leaf {
    path: String,
    key: Range<usize>,
    value: Range<usize>,
}

/// Every key whose value is not a table, with where it is written.
fn collect_leaves(table: &DeTable, prefix: &str, leaves: &mut Vec<Leaf>) {
    for (key, value) in table.iter() {
        let path = format!("{prefix}{}", key.get_ref());
        match value.get_ref() {
            DeValue::Table(inner) => collect_leaves(inner, &format!("{path}."), leaves),
            DeValue::Array(items) if items.iter().all(|i| i.get_ref().is_table()) => {
                for (i, item) in items.iter().enumerate() {
                    if let DeValue::Table(inner) = item.get_ref() {
                        collect_leaves(inner, &format!("{path}[{i}]."), leaves);
                    }
                }
            }
            _ => leaves.push(Leaf {
                path,
                key: key.span(),
                value: value.span(),
            }),
        }
    }
}

/// The table at a field path such as `pool[0].backends[0].` (empty for the root).
fn table_at<'a, 'i>(root: &'a DeTable<'i>, path: &str) -> &'a DeTable<'i> {
    let mut table = root;
    for step in path.split('.').filter(|s| !s.is_empty()) {
        let (key, index) = match step.split_once('[') {
            Some((key, index)) => (key, index.trim_end_matches(']').parse::<usize>().ok()),
            None => (step, None),
        };
        let mut value = table[key].get_ref();
        if let Some(index) = index {
            value = value[index].get_ref();
        }
        table = value
            .as_table()
            .unwrap_or_else(|| panic!("{path} is a table"));
    }
    table
}
