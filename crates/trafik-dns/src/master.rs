//! RFC 1035 master files (zone files), read with hickory's parser. hickory stops at the first
//! error without saying where, so a file that fails is parsed again in growing prefixes, cut
//! only between entries, to find the entry that breaks it: its line is what the user fixes.

use hickory_proto::rr::{DNSClass, Name, RData, Record, RecordType};
use hickory_proto::serialize::txt::Parser;

use crate::zone::{RecordData, RecordPlan, SoaPlan};

/// A problem in a master file, at a 1-based line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MasterError {
    pub line: usize,
    pub message: String,
}

/// The records of a master file for the zone `origin`, in no particular order. Records without
/// a TTL (and no `$TTL` before them) get `default_ttl`. Every owner must be inside the zone, the
/// class IN, and a SOA only at the apex; `$INCLUDE` is refused, so a zone is one file and each
/// error has one place.
pub fn read(text: &str, origin: &Name, default_ttl: u32) -> Result<Vec<Record>, MasterError> {
    let entries = entries(text);
    if let Some(line) = entries.iter().find_map(|e| e.include) {
        return Err(MasterError {
            line,
            message: "$INCLUDE is not supported: write the zone in one file".into(),
        });
    }
    let check = |prefix: &str| parse(prefix, origin, default_ttl);
    let whole = match check(text) {
        Ok(records) => return Ok(records),
        Err(message) => message,
    };
    // The shortest prefix of whole entries that fails ends with the entry at fault: failures
    // only grow with the text (each entry adds records or an error, never removes one).
    let (mut good, mut bad) = (0, entries.len());
    while good < bad {
        let middle = (good + bad) / 2;
        if check(&text[..entries[middle].end]).is_ok() {
            good = middle + 1;
        } else {
            bad = middle;
        }
    }
    match entries.get(bad) {
        Some(entry) => Err(MasterError {
            line: entry.line,
            message: check(&text[..entry.end]).err().unwrap_or(whole),
        }),
        // Only the whole text fails: an entry left open at the end (a parenthesis, a quote).
        None => Err(MasterError {
            line: text.lines().count().max(1),
            message: whole,
        }),
    }
}

/// A master file as a zone's plan: its SOA and apex NS records (when it has them) and the rest.
#[derive(Debug, Default)]
pub struct ZoneFile {
    pub soa: Option<SoaPlan>,
    pub name_servers: Vec<String>,
    pub records: Vec<RecordPlan>,
}

impl ZoneFile {
    /// Reads `text` as the zone `origin`; see [`read`].
    pub fn read(text: &str, origin: &Name, default_ttl: u32) -> Result<ZoneFile, MasterError> {
        let mut file = ZoneFile::default();
        for record in read(text, origin, default_ttl)? {
            match record.data {
                RData::SOA(soa) => {
                    let seconds = |value: i32| u32::try_from(value).unwrap_or(0);
                    file.soa = Some(SoaPlan {
                        mname: soa.mname.to_string(),
                        rname: soa.rname.to_string(),
                        serial: soa.serial,
                        refresh: seconds(soa.refresh),
                        retry: seconds(soa.retry),
                        expire: seconds(soa.expire),
                        minimum: soa.minimum,
                    });
                }
                RData::NS(ns) if record.name == *origin => file.name_servers.push(ns.0.to_string()),
                data => file.records.push(RecordPlan {
                    name: record.name.to_string(),
                    ttl: Some(record.ttl),
                    data: RecordData::Parsed(data),
                }),
            }
        }
        Ok(file)
    }
}

/// The data of one record of type `kind` written as a master file writes it (`10 posta` for
/// MX, `0 issue "letsencrypt.org"` for CAA), names relative to `origin`.
pub fn parse_value(kind: RecordType, value: &str, origin: &Name) -> Result<RData, String> {
    if value.contains(['\n', '\r', ';', '(', ')']) {
        return Err("expected the record's data on one line, without ; ( or )".into());
    }
    let text = format!("@ {kind} {value}\n");
    let mut records = parse(&text, origin, 0)?;
    match (records.pop(), records.is_empty()) {
        (Some(record), true) if record.record_type() == kind => Ok(record.data),
        _ => Err(format!("expected the data of one {kind} record")),
    }
}

/// One entry of a master file: a directive or a record, maybe over several lines.
struct Entry {
    /// The entry's first line with something on it.
    line: usize,
    /// The byte offset just after the entry's last line.
    end: usize,
    /// The line of an `$INCLUDE` directive, when this entry is one.
    include: Option<usize>,
}

/// The entries of `text`: lines joined while a parenthesis or a quote is open; comments and
/// blank lines belong to the entry after them.
fn entries(text: &str) -> Vec<Entry> {
    let mut entries = Vec::new();
    let (mut depth, mut quoted, mut escaped, mut comment) = (0usize, false, false, false);
    let mut first: Option<usize> = None;
    let mut line = 1;
    let mut line_start = 0;
    for (at, c) in text.char_indices() {
        if c == '\n' {
            comment = false;
            if depth == 0
                && !quoted
                && let Some(first) = first.take()
            {
                entries.push(entry(text, first, line_start, at + 1));
            }
            line += 1;
            line_start = at + 1;
            continue;
        }
        if comment {
            continue;
        }
        if escaped {
            escaped = false;
            continue;
        }
        match c {
            '\\' => escaped = true,
            '"' => quoted = !quoted,
            ';' if !quoted => comment = true,
            '(' if !quoted => depth += 1,
            ')' if !quoted => depth = depth.saturating_sub(1),
            _ => {}
        }
        if !comment && !c.is_whitespace() && first.is_none() {
            first = Some(line);
        }
    }
    if let Some(first) = first {
        entries.push(entry(text, first, line_start, text.len()));
    }
    entries
}

fn entry(text: &str, line: usize, line_start: usize, end: usize) -> Entry {
    let own_line = text.get(line_start..end).unwrap_or_default().trim_start();
    let directive = own_line.get(..8).unwrap_or_default();
    // A multi-line entry's first line is not `line_start`'s, but a directive fits on one line.
    let include = directive.eq_ignore_ascii_case("$include").then_some(line);
    Entry { line, end, include }
}

/// hickory's parse of `text` as the zone `origin`, and the checks of every record.
fn parse(text: &str, origin: &Name, default_ttl: u32) -> Result<Vec<Record>, String> {
    let text = format!("$TTL {default_ttl}\n{text}");
    let (_, sets) = Parser::new(text, None, Some(origin.clone()))
        .parse()
        .map_err(|error| error.to_string())?;
    let mut records = Vec::new();
    for set in sets.into_values() {
        for record in set {
            if !origin.zone_of(&record.name) {
                return Err(format!("{} is not inside the zone {origin}", record.name));
            }
            if record.dns_class != DNSClass::IN {
                return Err(format!(
                    "{} has class {}; a zone here is class IN",
                    record.name, record.dns_class
                ));
            }
            if record.record_type() == RecordType::SOA && record.name != *origin {
                return Err(format!(
                    "a SOA belongs at the apex {origin}, not at {}",
                    record.name
                ));
            }
            records.push(record);
        }
    }
    Ok(records)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn origin() -> Name {
        Name::from_ascii("kargo.test.").unwrap()
    }

    const ZONE: &str = "\
; the course's zone
$TTL 60
@   IN SOA ns1 hostmaster (
        7 3600 600 604800 30 )
    IN NS  ns1
    IN MX  10 posta
ns1 IN A   127.0.0.1
posta 120 IN A 127.0.0.25
*.kullanici IN TXT \"joker\"
";

    #[test]
    fn a_file_reads_with_relative_names_ttls_and_continued_lines() {
        let records = read(ZONE, &origin(), 300).unwrap();
        assert_eq!(records.len(), 6);
        let posta = records
            .iter()
            .find(|r| r.name.to_ascii() == "posta.kargo.test.")
            .unwrap();
        assert_eq!(posta.ttl, 120);
        let mx = records
            .iter()
            .find(|r| r.record_type() == RecordType::MX)
            .unwrap();
        assert_eq!(mx.ttl, 60);
        assert_eq!(mx.name, origin());
        let soa = records.iter().find(|r| r.record_type() == RecordType::SOA);
        assert!(matches!(&soa.unwrap().data, RData::SOA(soa) if soa.serial == 7));
    }

    #[test]
    fn records_take_the_default_ttl_without_a_ttl_directive() {
        let records = read("ns1 IN A 127.0.0.1\n", &origin(), 300).unwrap();
        assert_eq!(records[0].ttl, 300);
    }

    #[test]
    fn an_error_is_reported_at_the_line_of_its_entry() {
        let broken = ZONE.replace("posta 120 IN A 127.0.0.25", "posta 120 IN A 127.0.0.256");
        let error = read(&broken, &origin(), 300).unwrap_err();
        assert_eq!(error.line, 8, "{error:?}");
        let in_soa = ZONE.replace("7 3600", "yedi 3600");
        assert_eq!(read(&in_soa, &origin(), 300).unwrap_err().line, 3);
        let unknown = format!("{ZONE}\n\n  ; note\nx IN BOGUS 1\n");
        assert_eq!(read(&unknown, &origin(), 300).unwrap_err().line, 13);
        let open = format!("{ZONE}x IN TXT ( \"a\"\n");
        assert_eq!(read(&open, &origin(), 300).unwrap_err().line, 10);
    }

    #[test]
    fn names_outside_the_zone_other_classes_and_includes_are_refused() {
        let outside = format!("{ZONE}www.example.com. IN A 127.0.0.1\n");
        let error = read(&outside, &origin(), 300).unwrap_err();
        assert_eq!(error.line, 10);
        assert!(error.message.contains("not inside the zone"), "{error:?}");
        let chaos = format!("{ZONE}surum CH TXT \"1\"\n");
        assert_eq!(read(&chaos, &origin(), 300).unwrap_err().line, 10);
        let include = format!("{ZONE}$INCLUDE /etc/passwd\n");
        let error = read(&include, &origin(), 300).unwrap_err();
        assert_eq!(error.line, 10);
        assert!(error.message.contains("$INCLUDE"), "{error:?}");
    }

    #[test]
    fn a_value_is_one_record_s_data_relative_to_the_zone() {
        let mx = parse_value(RecordType::MX, "10 posta", &origin()).unwrap();
        assert_eq!(mx.to_string(), "10 posta.kargo.test.");
        let caa = parse_value(RecordType::CAA, "0 issue \"letsencrypt.org\"", &origin());
        assert!(matches!(caa, Ok(RData::CAA(_))), "{caa:?}");
        assert!(parse_value(RecordType::MX, "posta", &origin()).is_err());
        assert!(parse_value(RecordType::MX, "10 posta\nx A 1.2.3.4", &origin()).is_err());
    }

    /// Seeded mutations of a zone (cuts, splices of master-file syntax, byte flips) read to
    /// records or to an error on one of the text's lines, never a panic.
    #[test]
    fn mutated_zone_files_read_or_fail_at_one_of_their_lines() {
        let random = trafik_balance::random::SharedRng::new(27);
        let pieces: [&[u8]; 12] = [
            b"(",
            b")",
            b"\"",
            b";",
            b"\\",
            b"\n",
            b"$ORIGIN x.\n",
            b"$TTL 1w\n",
            b"@",
            b"*",
            b" IN CAA 128 issue \"",
            b" 65535 IN SRV 1 2 3 .",
        ];
        for _ in 0..3000 {
            let mut bytes = ZONE.as_bytes().to_vec();
            for _ in 0..=random.below(4) {
                let at = random.below(bytes.len() + 1);
                match random.below(3) {
                    0 => {
                        let end = (at + random.below(8)).min(bytes.len());
                        bytes.drain(at..end);
                    }
                    1 => {
                        let piece = pieces[random.below(pieces.len())];
                        bytes.splice(at..at, piece.iter().copied());
                    }
                    _ if at < bytes.len() => bytes[at] = random.below(256) as u8,
                    _ => {}
                }
            }
            let text = String::from_utf8_lossy(&bytes);
            if let Err(error) = read(&text, &origin(), 300) {
                let lines = text.lines().count().max(1);
                assert!(
                    (1..=lines).contains(&error.line),
                    "line {} of {lines} for {text:?}: {}",
                    error.line,
                    error.message
                );
            }
        }
    }
}
