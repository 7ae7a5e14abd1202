//! DNSSEC keys: a zone's KSK and ZSK, ECDSA P-256 with SHA-256 (algorithm 13, RFC 6605) — the
//! common choice: short keys and signatures keep signed answers under UDP's size, and every
//! validator supports it. Keys are hickory's signing keys on ring, kept as PKCS#8 files.

use std::fmt;
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use hickory_proto::dnssec::crypto::EcdsaSigningKey;
use hickory_proto::dnssec::rdata::{DNSKEY, DNSSECRData, DS, NSEC, NSEC3, NSEC3PARAM, RRSIG};
use hickory_proto::dnssec::{Algorithm, DigestType, DnssecSigner, Nsec3HashAlgorithm, SigningKey};
use hickory_proto::rr::{DNSClass, LowerName, Name, RData, Record, RecordSet, RecordType};
use hickory_proto::serialize::binary::BinEncodable;
use rustls_pki_types::PrivatePkcs8KeyDer;
use time::OffsetDateTime;

use crate::zone::{Code, Lookup, Zone};

/// ECDSA P-256 with SHA-256.
pub const ALGORITHM: Algorithm = Algorithm::ECDSAP256SHA256;

/// DNSKEY flags (RFC 4034 2.1.1): a zone key, and the KSK also a secure entry point.
const ZSK_FLAGS: u16 = 256;
const KSK_FLAGS: u16 = 257;

/// Signatures start an hour back, for validators whose clocks lag.
const BACKDATE: u64 = 3600;
/// And stay valid a week past signing.
const VALIDITY: u64 = 7 * 86_400;
/// A cached signature is made again once a day old, long before it expires.
pub const REFRESH: u64 = 86_400;
/// Signatures kept per zone (policy answers differ by region set, wildcards by name).
const CACHED_SIGNATURES: usize = 16_384;

/// A zone's DNSSEC: its two keys, read (or made) from the `keys` folder, and its denial.
#[derive(Clone, Debug)]
pub struct ZoneKeys {
    /// Signs the apex's DNSKEY RRset; the parent's DS names it.
    pub ksk: ZoneKey,
    /// Signs every other RRset.
    pub zsk: ZoneKey,
    /// `denial` in the config; [`ZoneKeys::load`] gives NSEC.
    pub denial: Denial,
}

/// How the zone proves that a name or type does not exist.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Denial {
    /// NSEC (RFC 4034): names in the clear.
    #[default]
    Nsec,
    /// NSEC3 (RFC 5155) with RFC 9276's parameters: SHA-1, no extra iterations, no salt; the
    /// chain of a transferred zone names hashes only, so a secondary cannot be walked.
    Nsec3,
}

/// One key: where it lives, and hickory's signer with its public half as the zone publishes it.
#[derive(Clone)]
pub struct ZoneKey {
    pub path: PathBuf,
    pub signer: Arc<DnssecSigner>,
}

/// Names the file and key tag, never the private key.
impl fmt::Debug for ZoneKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ZoneKey")
            .field("path", &self.path)
            .field("tag", &self.signer.dnskey().calculate_key_tag().ok())
            .finish()
    }
}

impl ZoneKeys {
    /// Reads the zone's KSK and ZSK from `folder`, making (and storing) each one that is absent,
    /// so a first start signs without a key ceremony and later starts keep the same keys.
    pub fn load(folder: &Path, zone: &Name) -> Result<ZoneKeys, String> {
        std::fs::create_dir_all(folder)
            .map_err(|error| format!("cannot make the key folder {}: {error}", folder.display()))?;
        let stem = if zone.is_root() {
            "root".to_owned()
        } else {
            zone.to_ascii().trim_end_matches('.').to_owned()
        };
        Ok(ZoneKeys {
            ksk: ZoneKey::load(folder.join(format!("{stem}.ksk.pk8")), KSK_FLAGS, zone)?,
            zsk: ZoneKey::load(folder.join(format!("{stem}.zsk.pk8")), ZSK_FLAGS, zone)?,
            denial: Denial::Nsec,
        })
    }

    /// The DS record (SHA-256 digest) of the KSK, for the parent zone.
    pub fn ds(&self, zone: &Name) -> Result<DS, String> {
        let dnskey = self.ksk.signer.dnskey();
        let tag = dnskey.calculate_key_tag().map_err(|e| e.to_string())?;
        let digest = dnskey
            .to_digest(zone, DigestType::SHA256)
            .map_err(|e| e.to_string())?;
        Ok(DS::new(
            tag,
            ALGORITHM,
            DigestType::SHA256,
            digest.as_ref().to_vec(),
        ))
    }
}

impl ZoneKey {
    fn load(path: PathBuf, flags: u16, zone: &Name) -> Result<ZoneKey, String> {
        let der = match std::fs::read(&path) {
            Ok(der) => der,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => make(&path)?,
            Err(error) => return Err(format!("cannot read the key {}: {error}", path.display())),
        };
        let key = EcdsaSigningKey::from_pkcs8(&PrivatePkcs8KeyDer::from(der), ALGORITHM)
            .map_err(|error| {
                format!(
                    "{} is not an ECDSA P-256 key in PKCS#8 (DER): {error}; remove it to have a new one made",
                    path.display()
                )
            })?;
        let public = key.to_public_key().map_err(|error| error.to_string())?;
        let signer = DnssecSigner::new(
            DNSKEY::with_flags(flags, public),
            Box::new(key),
            zone.clone(),
            Duration::from_secs(BACKDATE + VALIDITY),
        );
        Ok(ZoneKey {
            path,
            signer: Arc::new(signer),
        })
    }
}

/// Online signing of one zone's answers (to queries with the DO bit): the apex's DNSKEY RRset
/// by the KSK, every other RRset by the ZSK, when it is answered — so policy answers are signed
/// as they are chosen — with the signatures cached by the RRset's bytes. Denial is by "black
/// lies" (minimally covering NSEC, RFC 4470 as Cloudflare does it): a name that does not exist
/// gets NODATA with an NSEC at the name itself, next name `\000.name`, types RRSIG and NSEC; a
/// missing type gets the same NSEC listing the types the name has (NSEC3 likewise, at the
/// name's hash). Nothing of the zone's order is revealed, and no signing happens at load; only
/// a transfer gets the real chain ([`Zone::transfer_records`]).
pub struct Signing {
    apex: Name,
    denial: Denial,
    ksk: Arc<DnssecSigner>,
    zsk: Arc<DnssecSigner>,
    dnskeys: Vec<Record>,
    cache: quick_cache::sync::Cache<Vec<u8>, (u64, Record)>,
}

impl fmt::Debug for Signing {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Signing").field("apex", &self.apex).finish()
    }
}

impl Signing {
    /// `ttl` is the DNSKEY RRset's.
    pub fn new(keys: &ZoneKeys, apex: Name, ttl: u32) -> Signing {
        let dnskeys = [&keys.ksk, &keys.zsk]
            .iter()
            .map(|key| {
                let dnskey = DNSSECRData::DNSKEY(key.signer.dnskey().clone());
                Record::from_rdata(apex.clone(), ttl, RData::DNSSEC(dnskey))
            })
            .collect();
        Signing {
            apex,
            denial: keys.denial,
            ksk: keys.ksk.signer.clone(),
            zsk: keys.zsk.signer.clone(),
            dnskeys,
            cache: quick_cache::sync::Cache::new(CACHED_SIGNATURES),
        }
    }

    /// NSEC or NSEC3: what its black lies and its transferred chain are made of.
    pub fn denial(&self) -> Denial {
        self.denial
    }

    /// The apex's DNSKEY records, both keys.
    pub fn dnskeys(&self) -> &[Record] {
        &self.dnskeys
    }

    /// Turns `lookup`, the answer to `name`/`kind` from `zone`, into its signed form at `now`
    /// (Unix seconds). A referral gets the DS at the cut, or an NSEC there proving it has
    /// none (so a validator knows the child is unsigned); its NS and glue stay unsigned, as
    /// they are the child's. A negative answer gets a black lie at the name denied: the name
    /// asked, or the last target of a CNAME chain that ends in nothing.
    pub fn complete(
        &self,
        lookup: &mut Lookup,
        name: &LowerName,
        kind: RecordType,
        zone: &Zone,
        now: u64,
    ) {
        if lookup.code == Code::Refused {
            return;
        }
        let name = Name::from(name);
        if lookup.referral {
            let Some(cut) = lookup.authority.first().map(|ns| ns.name.clone()) else {
                return;
            };
            let mut proof = zone.ds_at(&LowerName::from(&cut));
            if proof.is_empty() {
                proof.extend(self.black_lie(cut, vec![RecordType::NS], zone.negative_ttl()));
            }
            lookup.answers = self.signed(std::mem::take(&mut lookup.answers), now);
            let signed = self.signed(proof, now);
            lookup.authority.extend(signed);
            return;
        }
        let negative = lookup.code == Code::NxDomain
            || lookup
                .authority
                .iter()
                .any(|r| r.record_type() == RecordType::SOA);
        let denied = match lookup.answers.last() {
            _ if !negative => None,
            None => Some(name),
            Some(last) => match &last.data {
                RData::CNAME(target) => Some(target.0.clone()),
                _ => None,
            },
        };
        if let Some(denied) = denied {
            let mut bitmap = match lookup.code {
                Code::NxDomain => Vec::new(),
                _ => zone.types_at(&LowerName::from(&denied)),
            };
            // The type asked at the name denied: the question's, or its CNAME's target's.
            bitmap.retain(|owned| *owned != kind);
            let ttl = lookup.authority.first().map_or(0, |soa| soa.ttl);
            if let Some(nsec) = self.black_lie(denied, bitmap, ttl) {
                lookup.authority.push(nsec);
                lookup.code = Code::NoError;
            }
        }
        lookup.answers = self.signed(std::mem::take(&mut lookup.answers), now);
        lookup.authority = self.signed(std::mem::take(&mut lookup.authority), now);
    }

    /// The apex's records of type `kind` that signing adds: DNSKEY, and NSEC3PARAM with NSEC3.
    pub fn apex_records(&self, kind: RecordType) -> Vec<Record> {
        match kind {
            RecordType::DNSKEY => self.dnskeys.clone(),
            RecordType::NSEC3PARAM => self.nsec3param().into_iter().collect(),
            _ => Vec::new(),
        }
    }

    /// The NSEC3PARAM record at the apex (TTL 0, as BIND serves it) of an NSEC3 zone.
    pub fn nsec3param(&self) -> Option<Record> {
        (self.denial == Denial::Nsec3).then(|| {
            let param = NSEC3PARAM::new(
                Nsec3HashAlgorithm::SHA1,
                false,
                NSEC3_ITERATIONS,
                Vec::new(),
            );
            let data = RData::DNSSEC(DNSSECRData::NSEC3PARAM(param));
            Record::from_rdata(self.apex.clone(), 0, data)
        })
    }

    /// The minimally covering denial at `name` ("black lie", RFC 4470; RFC 7129 §B for
    /// NSEC3): the name claimed to own `types` (and RRSIG), nothing between it and the next
    /// name to deny. NSEC: next name `\000.name`; NSEC3: at the name's hash, next the hash
    /// plus one. `None` for a name too long to have the next one.
    fn black_lie(&self, name: Name, mut types: Vec<RecordType>, ttl: u32) -> Option<Record> {
        types.push(RecordType::RRSIG);
        match self.denial {
            Denial::Nsec => {
                types.push(RecordType::NSEC);
                let next = name.prepend_label(&[0u8][..]).ok()?;
                let nsec = DNSSECRData::NSEC(NSEC::new(next, types));
                Some(Record::from_rdata(name, ttl, RData::DNSSEC(nsec)))
            }
            Denial::Nsec3 => {
                let hash = nsec3_hash(&name)?;
                let mut next = hash.clone();
                for byte in next.iter_mut().rev() {
                    *byte = byte.wrapping_add(1);
                    if *byte != 0 {
                        break;
                    }
                }
                nsec3(&self.apex, &hash, next, types, ttl)
            }
        }
    }

    /// `records` with each RRset followed by its RRSIG.
    pub(crate) fn signed(&self, records: Vec<Record>, now: u64) -> Vec<Record> {
        let mut sets: Vec<RecordSet> = Vec::new();
        for record in records {
            let same = |set: &&mut RecordSet| {
                set.name() == &record.name && set.record_type() == record.record_type()
            };
            match sets.iter_mut().find(same) {
                Some(set) => {
                    set.insert(record, 0);
                }
                None => {
                    let mut set =
                        RecordSet::with_ttl(record.name.clone(), record.record_type(), record.ttl);
                    set.insert(record, 0);
                    sets.push(set);
                }
            }
        }
        let mut out = Vec::new();
        for set in sets {
            let signature = self.signature(&set, now);
            out.extend(set.records_without_rrsigs().cloned());
            out.extend(signature);
        }
        out
    }

    /// The RRSIG of `set`, from the cache while younger than a day; `None` only if hickory
    /// cannot encode or sign it (the RRset then goes unsigned rather than the query failing).
    fn signature(&self, set: &RecordSet, now: u64) -> Option<Record> {
        let mut key = Vec::new();
        for record in set.records_without_rrsigs() {
            key.extend(record.to_bytes().ok()?);
        }
        if let Some((signed, record)) = self.cache.get(&key)
            && now.saturating_sub(signed) < REFRESH
        {
            return Some(record);
        }
        let signer = match set.record_type() {
            RecordType::DNSKEY => &self.ksk,
            _ => &self.zsk,
        };
        let inception = i64::try_from(now.saturating_sub(BACKDATE)).ok()?;
        let inception = OffsetDateTime::from_unix_timestamp(inception).ok()?;
        let rrsig = RRSIG::from_rrset(set, DNSClass::IN, inception, signer).ok()?;
        let rdata = RData::DNSSEC(DNSSECRData::RRSIG(rrsig));
        let record = Record::from_rdata(set.name().clone(), set.ttl(), rdata);
        self.cache.insert(key, (now, record.clone()));
        Some(record)
    }
}

/// NSEC3 hashes with no extra iterations and no salt (RFC 9276 §3.1).
const NSEC3_ITERATIONS: u16 = 0;

/// The NSEC3 hash of `name` (SHA-1, RFC 5155 §5).
pub fn nsec3_hash(name: &Name) -> Option<Vec<u8>> {
    let digest = Nsec3HashAlgorithm::SHA1
        .hash(&[], name, NSEC3_ITERATIONS)
        .ok()?;
    Some(digest.as_ref().to_vec())
}

/// The NSEC3 record at the hash `owner` in the zone `apex`, next hash `next`, `types` at the
/// name hashed.
pub fn nsec3(
    apex: &Name,
    owner: &[u8],
    next: Vec<u8>,
    types: Vec<RecordType>,
    ttl: u32,
) -> Option<Record> {
    let label = data_encoding::BASE32HEX_NOPAD
        .encode(owner)
        .to_ascii_lowercase();
    let name = Name::from_ascii(label).ok()?.append_domain(apex).ok()?;
    let data = NSEC3::new(
        Nsec3HashAlgorithm::SHA1,
        false,
        NSEC3_ITERATIONS,
        Vec::new(),
        next,
        types,
    );
    Some(Record::from_rdata(
        name,
        ttl,
        RData::DNSSEC(DNSSECRData::NSEC3(data)),
    ))
}

/// Makes a key and writes it readable by its owner only; `create_new` so two starts never
/// overwrite each other's key.
fn make(path: &Path) -> Result<Vec<u8>, String> {
    let der = EcdsaSigningKey::generate_pkcs8(ALGORITHM)
        .map_err(|error| format!("cannot make a key: {error}"))?
        .secret_pkcs8_der()
        .to_vec();
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .and_then(|mut file| file.write_all(&der))
        .map_err(|error| format!("cannot write the key {}: {error}", path.display()))?;
    Ok(der)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn folder(name: &str) -> PathBuf {
        let folder =
            std::env::temp_dir().join(format!("trafik-dnssec-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&folder);
        folder
    }

    #[test]
    fn keys_are_made_once_then_read_back() {
        let folder = folder("made");
        let zone = Name::from_ascii("kargo.test.").unwrap();
        let made = ZoneKeys::load(&folder, &zone).unwrap();
        let (ksk, zsk) = (made.ksk.signer.dnskey(), made.zsk.signer.dnskey());
        assert!(ksk.secure_entry_point() && ksk.zone_key());
        assert!(!zsk.secure_entry_point() && zsk.zone_key());
        assert_ne!(ksk.public_key(), zsk.public_key());
        let read = ZoneKeys::load(&folder, &zone).unwrap();
        assert_eq!(read.ksk.signer.dnskey(), ksk);
        assert_eq!(read.zsk.signer.dnskey(), zsk);
        let ds = read.ds(&zone).unwrap();
        assert_eq!(ds.algorithm(), ALGORITHM);
        assert_eq!(ds.digest().len(), 32);
        assert!(ds.covers(&zone, ksk).unwrap());
        std::fs::remove_dir_all(folder).unwrap();
    }

    #[test]
    fn a_damaged_key_file_is_an_error_not_a_new_key() {
        let folder = folder("damaged");
        std::fs::create_dir_all(&folder).unwrap();
        std::fs::write(folder.join("kargo.test.ksk.pk8"), b"not a key").unwrap();
        let zone = Name::from_ascii("kargo.test.").unwrap();
        let error = ZoneKeys::load(&folder, &zone).unwrap_err();
        assert!(error.contains("kargo.test.ksk.pk8"), "{error}");
        std::fs::remove_dir_all(folder).unwrap();
    }
}
