//! An aggregated answer's parts: what each part's missing-part contract makes of a part that
//! did not answer well, and the object the merge expression reads.

use jaq_json::{Map, Val};

use crate::jq::parse;

/// What an aggregate answers when a part is missing (an error status, an unreadable body, a
/// timeout, no backend).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Missing {
    /// The part's key is present with `null`.
    Null,
    /// The part's key is left out.
    Omit,
    /// The whole answer fails with the part's status and body.
    Fail,
}

impl Missing {
    /// The name written in configuration files.
    pub fn name(self) -> &'static str {
        match self {
            Missing::Null => "null",
            Missing::Omit => "omit",
            Missing::Fail => "fail",
        }
    }
}

impl std::str::FromStr for Missing {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        match text {
            "null" => Ok(Missing::Null),
            "omit" => Ok(Missing::Omit),
            "fail" => Ok(Missing::Fail),
            _ => Err(format!(
                "expected \"null\", \"omit\" or \"fail\", found {text:?}"
            )),
        }
    }
}

/// How one part's call ended.
pub enum Answer<'a> {
    /// The upstream answered with this status and body.
    Answered { status: u16, body: &'a [u8] },
    /// No answer: timeout, connect failure, no backend. `status` is what trafik would answer.
    Failed { status: u16 },
}

/// What the parts make.
pub enum Assembled {
    /// The merge expression's input, and the names of the parts missing from it.
    Input { parts: Val, missing: Vec<usize> },
    /// A `fail` part was missing: the answer is this part's.
    Fail { part: usize },
}

/// Puts the parts' answers together under their names, in the parts' order. A part is present
/// when it answered 2xx with a JSON body.
pub fn assemble<S: AsRef<str>>(parts: &[(S, Missing)], answers: &[Answer<'_>]) -> Assembled {
    let mut object = Map::default();
    let mut missing = Vec::new();
    for (index, ((name, contract), answer)) in parts.iter().zip(answers).enumerate() {
        let value = match answer {
            Answer::Answered { status, body } if (200..300).contains(status) => parse(body),
            _ => None,
        };
        let value = match (value, contract) {
            (Some(value), _) => value,
            (None, Missing::Fail) => return Assembled::Fail { part: index },
            (None, Missing::Null) => {
                missing.push(index);
                Val::Null
            }
            (None, Missing::Omit) => {
                missing.push(index);
                continue;
            }
        };
        object.insert(Val::from(name.as_ref().to_owned()), value);
    }
    Assembled::Input {
        parts: Val::Obj(object.into()),
        missing,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::jq::write;

    const PARTS: [(&str, Missing); 2] = [("durum", Missing::Fail), ("ucret", Missing::Null)];

    fn input(assembled: Assembled) -> (String, Vec<usize>) {
        match assembled {
            Assembled::Input { parts, missing } => {
                (String::from_utf8(write(&parts)).unwrap(), missing)
            }
            Assembled::Fail { part } => panic!("part {part} failed"),
        }
    }

    #[test]
    fn present_parts_are_keyed_by_name_in_part_order() {
        let answers = [
            Answer::Answered {
                status: 200,
                body: br#"{"a":1}"#,
            },
            Answer::Answered {
                status: 200,
                body: br#"{"b":2}"#,
            },
        ];
        assert_eq!(
            input(assemble(&PARTS, &answers)),
            (r#"{"durum":{"a":1},"ucret":{"b":2}}"#.to_owned(), vec![])
        );
    }

    #[test]
    fn each_contract_treats_a_missing_part_its_way() {
        let answers = [
            Answer::Answered {
                status: 200,
                body: br#"{"a":1}"#,
            },
            Answer::Answered {
                status: 404,
                body: br#"{"hata":"bulunamadi"}"#,
            },
        ];
        assert_eq!(
            input(assemble(&PARTS, &answers)),
            (r#"{"durum":{"a":1},"ucret":null}"#.to_owned(), vec![1])
        );
        let omit = [PARTS[0], ("ucret", Missing::Omit)];
        let answers = [
            Answer::Answered {
                status: 200,
                body: br#"{"a":1}"#,
            },
            Answer::Failed { status: 504 },
        ];
        assert_eq!(
            input(assemble(&omit, &answers)),
            (r#"{"durum":{"a":1}}"#.to_owned(), vec![1])
        );
        let answers = [
            Answer::Answered {
                status: 200,
                body: b"not json",
            },
            Answer::Answered {
                status: 200,
                body: br#"{}"#,
            },
        ];
        assert!(matches!(
            assemble(&PARTS, &answers),
            Assembled::Fail { part: 0 }
        ));
    }
}
