//! DNSSEC keys: a zone's KSK and ZSK, ECDSA P-256 with SHA-256 (algorithm 13, RFC 6605) — the
//! common choice: short keys and signatures keep signed answers under UDP's size, and every
//! validator supports it. Keys are hickory's signing keys on ring, kept as PKCS#8 files.

use std::fmt;
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use hickory_proto::dnssec::crypto::EcdsaSigningKey;
use hickory_proto::dnssec::rdata::{DNSKEY, DS};
use hickory_proto::dnssec::{Algorithm, DigestType, SigningKey};
use hickory_proto::rr::Name;
use rustls_pki_types::PrivatePkcs8KeyDer;

/// ECDSA P-256 with SHA-256.
pub const ALGORITHM: Algorithm = Algorithm::ECDSAP256SHA256;

/// DNSKEY flags (RFC 4034 2.1.1): a zone key, and the KSK also a secure entry point.
const ZSK_FLAGS: u16 = 256;
const KSK_FLAGS: u16 = 257;

/// A zone's two keys, read (or made) from the `keys` folder.
#[derive(Clone, Debug)]
pub struct ZoneKeys {
    /// Signs the apex's DNSKEY RRset; the parent's DS names it.
    pub ksk: ZoneKey,
    /// Signs every other RRset.
    pub zsk: ZoneKey,
}

/// One key: where it lives and its public half as the zone publishes it.
#[derive(Clone)]
pub struct ZoneKey {
    pub path: PathBuf,
    pub dnskey: DNSKEY,
}

/// Names the file and key tag, never the private key.
impl fmt::Debug for ZoneKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ZoneKey")
            .field("path", &self.path)
            .field("tag", &self.dnskey.calculate_key_tag().ok())
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
            ksk: ZoneKey::load(folder.join(format!("{stem}.ksk.pk8")), KSK_FLAGS)?,
            zsk: ZoneKey::load(folder.join(format!("{stem}.zsk.pk8")), ZSK_FLAGS)?,
        })
    }

    /// The DS record (SHA-256 digest) of the KSK, for the parent zone.
    pub fn ds(&self, zone: &Name) -> Result<DS, String> {
        let dnskey = &self.ksk.dnskey;
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
    fn load(path: PathBuf, flags: u16) -> Result<ZoneKey, String> {
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
        Ok(ZoneKey {
            path,
            dnskey: DNSKEY::with_flags(flags, public),
        })
    }
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
        assert!(made.ksk.dnskey.secure_entry_point() && made.ksk.dnskey.zone_key());
        assert!(!made.zsk.dnskey.secure_entry_point() && made.zsk.dnskey.zone_key());
        assert_ne!(made.ksk.dnskey.public_key(), made.zsk.dnskey.public_key());
        let read = ZoneKeys::load(&folder, &zone).unwrap();
        assert_eq!(read.ksk.dnskey, made.ksk.dnskey);
        assert_eq!(read.zsk.dnskey, made.zsk.dnskey);
        let ds = read.ds(&zone).unwrap();
        assert_eq!(ds.algorithm(), ALGORITHM);
        assert_eq!(ds.digest().len(), 32);
        assert!(ds.covers(&zone, &read.ksk.dnskey).unwrap());
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
