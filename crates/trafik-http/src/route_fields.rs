//! A route's every setting as `field path = value` pairs, read from its derived `Debug`, so
//! that `trafik plan` compares all of a route — CORS, compression, matchers, split, mirror,
//! rewrites, redirect, address rules, priority, and whatever field a route gains later —
//! without a list of fields to keep up to date.
//!
//! The pretty `Debug` form (`{:#?}`) puts one field or element a line, each nested value
//! opened by `{`, `(` or `[` at its line's end and closed on a line of its own; strings are
//! escaped onto one line. That makes it a tree read line by line: a struct's fields are named
//! by their key, a list's elements by their variant (`filters.Cors`), `Some(…)` and newtype
//! variants are see-through, and a value of plain items (`[GET, POST]`, `Cookie("k")`) is one
//! leaf.

use std::collections::HashMap;
use std::fmt::Debug;

/// Fields whose values are not printed, only said to differ.
const HIDDEN: [&str; 1] = ["secret"];

/// One setting that differs between two routes; `None` where the route does not have it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FieldChange {
    /// The path of the field in the route's plan: `filters.Cors.max_age`, `routing.priority`.
    pub field: String,
    pub before: Option<String>,
    pub after: Option<String>,
}

/// The settings of `after` (a [`RoutePlan`](crate::plan::RoutePlan)) that differ from those of `before`: changed, then removed in the
/// order of `before`, then added in the order of `after`. A value that appears or goes whole
/// (a new filter, a mirror where there was `None`) is one change, written out on one line.
pub fn changes<T: Debug>(before: &T, after: &T) -> Vec<FieldChange> {
    let (old, new) = (fields(before), fields(after));
    let by_path = |fields: &[Field]| -> HashMap<String, Field> {
        fields.iter().map(|f| (f.path.clone(), f.clone())).collect()
    };
    let (old_by_path, new_by_path) = (by_path(&old), by_path(&new));
    let mut out = Vec::new();
    // Paths whose whole value was written out: their inner fields are not listed again.
    let mut whole: Vec<String> = Vec::new();
    let paths = old.iter().map(|f| &f.path).chain(
        new.iter()
            .map(|f| &f.path)
            .filter(|p| !old_by_path.contains_key(*p)),
    );
    for path in paths {
        if whole.iter().any(|w| path.starts_with(&format!("{w}."))) {
            continue;
        }
        let (was, will) = (old_by_path.get(path), new_by_path.get(path));
        if was.map(|f| &f.value) == will.map(|f| &f.value) {
            continue;
        }
        // A group that replaces a plain value or nothing is written out whole.
        let group = |field: Option<&Field>| field.is_some_and(|f| f.whole.is_some());
        let written_whole = group(was) != group(will);
        if written_whole {
            whole.push(path.clone());
        }
        let shown = |field: Option<&Field>| {
            field.map(|f| match (&f.whole, written_whole) {
                (Some(text), true) => text.clone(),
                _ => f.value.clone(),
            })
        };
        out.push(change(path, shown(was), shown(will)));
    }
    out
}

fn change(path: &str, before: Option<String>, after: Option<String>) -> FieldChange {
    let hidden = path.split('.').any(|segment| HIDDEN.contains(&segment));
    let shown =
        |value: Option<String>| value.map(|v| if hidden { "(hidden)".to_owned() } else { v });
    FieldChange {
        field: path.to_owned(),
        before: shown(before),
        after: shown(after),
    }
}

/// One leaf of a value's tree, or the head of one of its groups.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Field {
    pub path: String,
    /// A leaf's value; a group's type or variant (`CorsPlan`, `Pool`), or a list's element
    /// names (`[Cors, Compress]`): what tells a change of kind or of order.
    pub value: String,
    /// A group's whole value on one line; `None` for a leaf.
    pub whole: Option<String>,
}

/// Every leaf and group of `value`'s pretty `Debug` form with its path, in order.
pub fn fields(value: &impl Debug) -> Vec<Field> {
    let text = format!("{value:#?}");
    let mut lines = text.lines().map(str::trim);
    let root = match lines.next() {
        Some(first) => match opening(first) {
            Some((head, open)) => group(head, open, &mut lines),
            None => Node::Leaf(first.to_owned()),
        },
        None => return Vec::new(),
    };
    let mut out = Vec::new();
    flatten(&root, "", &mut out);
    out
}

enum Node {
    Leaf(String),
    /// `head` is what stands before the opening bracket: a type or variant name, or nothing.
    Group {
        head: String,
        open: char,
        children: Vec<(Option<String>, Node)>,
    },
}

/// `Name {`, `key: Some(`, `[` → the text before the bracket and the bracket.
fn opening(line: &str) -> Option<(&str, char)> {
    let open = line
        .chars()
        .last()
        .filter(|c| matches!(c, '{' | '(' | '['))?;
    Some((line[..line.len() - 1].trim_end(), open))
}

fn group<'a>(head: &str, open: char, lines: &mut impl Iterator<Item = &'a str>) -> Node {
    let mut children = Vec::new();
    while let Some(line) = lines.next() {
        let line = line.strip_suffix(',').unwrap_or(line);
        if matches!(line, "}" | ")" | "]") {
            break;
        }
        let (key, rest) = split_key(line);
        let child = match opening(rest) {
            Some((head, open)) => group(head, open, lines),
            None => Node::Leaf(rest.to_owned()),
        };
        children.push((key, child));
    }
    Node::Group {
        head: head.to_owned(),
        open,
        children,
    }
}

/// `name: value` → the name and the value; a line without a field name is all value.
fn split_key(line: &str) -> (Option<String>, &str) {
    let Some((key, rest)) = line.split_once(": ") else {
        return (None, line);
    };
    let identifier = !key.is_empty()
        && key.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        && !key.starts_with(|c: char| c.is_ascii_digit());
    let quoted = key.len() >= 2
        && key.starts_with('"')
        && key.ends_with('"')
        && !key[1..key.len() - 1].contains('"');
    match identifier || quoted {
        true => (Some(key.to_owned()), rest),
        false => (None, line),
    }
}

fn join(path: &str, segment: &str) -> String {
    match path.is_empty() {
        true => segment.to_owned(),
        false => format!("{path}.{segment}"),
    }
}

fn flatten(node: &Node, path: &str, out: &mut Vec<Field>) {
    let Node::Group {
        head,
        open,
        children,
    } = node
    else {
        if let Node::Leaf(value) = node {
            out.push(Field {
                path: path.to_owned(),
                value: value.clone(),
                whole: None,
            });
        }
        return;
    };
    let plain = children
        .iter()
        .all(|(key, child)| key.is_none() && matches!(child, Node::Leaf(_)));
    if plain {
        out.push(Field {
            path: path.to_owned(),
            value: compact(node),
            whole: None,
        });
        return;
    }
    if let [(None, inner @ Node::Group { .. })] = children.as_slice()
        && *open == '('
    {
        // `Some(…)`, `Cors(…)`: the value inside stands for it.
        return flatten(inner, path, out);
    }
    let mut seen: HashMap<String, usize> = HashMap::new();
    let segments: Vec<String> = children
        .iter()
        .enumerate()
        .map(|(index, (key, child))| match key {
            Some(key) => key.trim_matches('"').to_owned(),
            // A list's element by its variant or type (`filters.Cors`), numbered from the
            // second of a kind on; by its place when it has no name.
            None => match child {
                Node::Group { head, .. } if !head.is_empty() => {
                    let name = head.split([' ', '(']).next().unwrap_or(head).to_owned();
                    let count = seen.entry(name.clone()).or_default();
                    *count += 1;
                    match *count {
                        1 => name,
                        n => format!("{name}#{n}"),
                    }
                }
                _ => index.to_string(),
            },
        })
        .collect();
    if !path.is_empty() {
        let value = match head.is_empty() {
            true => format!("[{}]", segments.join(", ")),
            false => head.clone(),
        };
        out.push(Field {
            path: path.to_owned(),
            value,
            whole: Some(compact(node)),
        });
    }
    for ((_, child), segment) in children.iter().zip(&segments) {
        flatten(child, &join(path, segment), out);
    }
}

/// A value on one line: `[GET, POST]`, `Cookie("trafik_split")`, `MirrorPlan { pool: "g", … }`.
fn compact(node: &Node) -> String {
    match node {
        Node::Leaf(value) => value.clone(),
        Node::Group {
            head,
            open,
            children,
        } => {
            let close = match open {
                '{' => '}',
                '(' => ')',
                _ => ']',
            };
            let items: Vec<String> = children
                .iter()
                .map(|(key, child)| match key {
                    Some(key) => format!("{key}: {}", compact(child)),
                    None => compact(child),
                })
                .collect();
            let space = if *open == '{' { " " } else { "" };
            let head = match (head.is_empty(), *open) {
                (false, '{') => format!("{head} "),
                _ => head.clone(),
            };
            format!("{head}{open}{space}{}{space}{close}", items.join(", "))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug)]
    #[allow(dead_code)] // read through `Debug` only
    enum Filter {
        Header { name: String, value: String },
        Limit(u32),
        Cors(Cors),
    }

    #[derive(Debug)]
    #[allow(dead_code)]
    struct Cors {
        origins: Vec<String>,
        max_age: Option<std::time::Duration>,
    }

    #[derive(Debug)]
    #[allow(dead_code)]
    struct Route {
        path: String,
        methods: Vec<&'static str>,
        filters: Vec<Filter>,
        mirror: Option<(String, u8)>,
        secret: Vec<u8>,
    }

    fn header(name: &str, value: &str) -> Filter {
        Filter::Header {
            name: name.into(),
            value: value.into(),
        }
    }

    fn route(filters: Vec<Filter>) -> Route {
        Route {
            path: "/takip".into(),
            methods: vec!["GET", "PUT"],
            filters,
            mirror: None,
            secret: vec![1, 2],
        }
    }

    fn cors(max_age: Option<u64>) -> Filter {
        Filter::Cors(Cors {
            origins: vec!["https://a.test".into()],
            max_age: max_age.map(std::time::Duration::from_secs),
        })
    }

    fn shown(changes: &[FieldChange]) -> Vec<String> {
        let side = |v: &Option<String>| v.clone().unwrap_or_else(|| "-".into());
        changes
            .iter()
            .map(|c| format!("{}: {} → {}", c.field, side(&c.before), side(&c.after)))
            .collect()
    }

    #[test]
    fn every_leaf_and_group_is_named_by_its_path() {
        let route = route(vec![
            header("a", "b: c {"),
            Filter::Limit(5),
            cors(None),
            header("x", "y"),
        ]);
        let got: Vec<String> = fields(&route)
            .into_iter()
            .map(|f| format!("{} = {}", f.path, f.value))
            .collect();
        assert_eq!(
            got,
            [
                "path = \"/takip\"",
                "methods = [\"GET\", \"PUT\"]",
                "filters = [Header, Limit, Cors, Header#2]",
                "filters.Header = Header",
                "filters.Header.name = \"a\"",
                "filters.Header.value = \"b: c {\"",
                "filters.Limit = Limit(5)",
                "filters.Cors = Cors",
                "filters.Cors.origins = [\"https://a.test\"]",
                "filters.Cors.max_age = None",
                "filters.Header#2 = Header",
                "filters.Header#2.name = \"x\"",
                "filters.Header#2.value = \"y\"",
                "mirror = None",
                "secret = [1, 2]",
            ]
        );
    }

    #[test]
    fn changed_removed_and_added_fields_are_listed_and_a_new_group_on_one_line() {
        let before = route(vec![header("a", "b"), Filter::Limit(5), cors(None)]);
        let mut after = route(vec![header("a", "b"), cors(Some(600))]);
        after.mirror = Some(("golge".into(), 5));
        after.secret = vec![3];
        assert_eq!(
            shown(&changes(&before, &after)),
            [
                "filters: [Header, Limit, Cors] → [Header, Cors]",
                "filters.Limit: Limit(5) → -",
                "filters.Cors.max_age: None → Some(600s)",
                "mirror: None → (\"golge\", 5)",
                "secret: (hidden) → (hidden)",
            ]
        );
        let bare = route(vec![header("a", "b")]);
        let with_cors = route(vec![header("a", "b"), cors(Some(60))]);
        assert_eq!(
            shown(&changes(&bare, &with_cors)),
            [
                "filters: [Header] → [Header, Cors]",
                "filters.Cors: - → Cors { origins: [\"https://a.test\"], max_age: Some(60s) }",
            ]
        );
        assert!(changes(&with_cors, &route(vec![header("a", "b"), cors(Some(60))])).is_empty());
    }
}
