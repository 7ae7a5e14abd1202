//! JSON Web Token verification with the algorithm pinned per key: the token's header may only
//! name the algorithm its key was configured (or published) with, so `alg: none` and algorithm
//! confusion (an HS256 token "signed" with an RSA public key) never verify. Time is passed in.

use std::borrow::Cow;

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use hmac::{Hmac, KeyInit, Mac};
use jsonwebtoken::crypto::CryptoProvider;
use jsonwebtoken::jwk::{AlgorithmParameters, EllipticCurve, Jwk, JwkSet};
use jsonwebtoken::{Algorithm, AlgorithmFamily, DecodingKey};
use serde::Deserialize;
use serde_json::{Map, Value};
use sha2::{Sha256, Sha384, Sha512};

/// One verification key and the one algorithm it accepts.
pub struct PinnedKey {
    /// The `kid` a token names to choose this key; `None` matches tokens without one.
    pub id: Option<String>,
    pub algorithm: Algorithm,
    key: SignatureCheck,
}

/// How a key checks a signature. A shared secret's HMAC states (the key hashed with its inner
/// and outer pads) are computed once here, not for every token: with them a token costs two
/// hash blocks less. Public keys go through jsonwebtoken's verifiers.
enum SignatureCheck {
    Hs256(Hmac<Sha256>),
    Hs384(Hmac<Sha384>),
    Hs512(Hmac<Sha512>),
    PublicKey(DecodingKey),
}

impl SignatureCheck {
    /// A shared secret's state for an HMAC algorithm; `None` for any other (HMAC takes a key
    /// of any length).
    fn secret(algorithm: Algorithm, secret: &[u8]) -> Option<SignatureCheck> {
        Some(match algorithm {
            Algorithm::HS256 => SignatureCheck::Hs256(Hmac::new_from_slice(secret).ok()?),
            Algorithm::HS384 => SignatureCheck::Hs384(Hmac::new_from_slice(secret).ok()?),
            Algorithm::HS512 => SignatureCheck::Hs512(Hmac::new_from_slice(secret).ok()?),
            _ => return None,
        })
    }

    /// Whether `signature` signs `message` (the token's first two parts).
    fn verifies(&self, algorithm: Algorithm, message: &[u8], signature: &[u8]) -> bool {
        fn hmac<M: Mac + Clone>(state: &M, message: &[u8], signature: &[u8]) -> bool {
            let mut mac = state.clone();
            mac.update(message);
            // Constant time: `verify_slice` compares every byte.
            mac.verify_slice(signature).is_ok()
        }
        match self {
            SignatureCheck::Hs256(state) => hmac(state, message, signature),
            SignatureCheck::Hs384(state) => hmac(state, message, signature),
            SignatureCheck::Hs512(state) => hmac(state, message, signature),
            SignatureCheck::PublicKey(key) => CryptoProvider::try_get_default()
                .and_then(|provider| (provider.verifier_factory)(&algorithm, key).ok())
                .is_some_and(|verifier| verifier.verify(message, &signature.to_vec()).is_ok()),
        }
    }
}

/// The keys a route trusts: configured ones, or a JWKS document's.
#[derive(Default)]
pub struct KeySet {
    keys: Vec<PinnedKey>,
}

/// The algorithms trafik accepts, by their JOSE names.
pub const ALGORITHMS: &str =
    "HS256, HS384, HS512, RS256, RS384, RS512, PS256, PS384, PS512, ES256, ES384, EdDSA";

/// Parses a JOSE algorithm name (`none` is not one).
pub fn algorithm(name: &str) -> Result<Algorithm, String> {
    name.parse::<Algorithm>()
        .map_err(|_| format!("expected one of {ALGORITHMS}, found {name:?}"))
}

impl PinnedKey {
    /// A shared secret for HS256/384/512.
    pub fn secret(algorithm: Algorithm, secret: &[u8]) -> Result<PinnedKey, String> {
        let key = SignatureCheck::secret(algorithm, secret)
            .ok_or_else(|| format!("a secret verifies HS256/384/512, not {algorithm:?}"))?;
        Ok(PinnedKey {
            id: None,
            algorithm,
            key,
        })
    }

    /// A PEM public key (RSA, EC or Ed25519) for the asymmetric algorithm named.
    pub fn pem(algorithm: Algorithm, pem: &[u8]) -> Result<PinnedKey, String> {
        use Algorithm::*;
        let key = match algorithm {
            RS256 | RS384 | RS512 | PS256 | PS384 | PS512 => DecodingKey::from_rsa_pem(pem),
            ES256 | ES384 => DecodingKey::from_ec_pem(pem),
            EdDSA => DecodingKey::from_ed_pem(pem),
            _ => return Err(format!("{algorithm:?} takes a `secret`, not a PEM key")),
        }
        .map_err(|e| format!("not a PEM public key for {algorithm:?}: {e}"))?;
        Ok(PinnedKey {
            id: None,
            algorithm,
            key: SignatureCheck::PublicKey(key),
        })
    }
}

impl KeySet {
    pub fn new(keys: Vec<PinnedKey>) -> Self {
        KeySet { keys }
    }

    /// The keys of a JWKS document. A key is pinned to its `alg`; without one, to the only
    /// algorithm its type and curve allow (RS256 for RSA, ES256/ES384 by curve, EdDSA for
    /// Ed25519); symmetric (`oct`) keys must name theirs. Keys for encryption (`use: enc`) and
    /// keys trafik cannot use are skipped; a document with no usable key is an error.
    pub fn from_jwks(document: &str) -> Result<KeySet, String> {
        let set: JwkSet =
            serde_json::from_str(document).map_err(|e| format!("not a JWKS document: {e}"))?;
        let keys: Vec<PinnedKey> = set.keys.iter().filter_map(pinned_jwk).collect();
        if keys.is_empty() {
            return Err("the JWKS document has no signing key trafik can use".into());
        }
        Ok(KeySet { keys })
    }

    pub fn len(&self) -> usize {
        self.keys.len()
    }

    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    /// The key a token's `kid` names; a token without `kid` takes the only key, or the only
    /// key without an id.
    fn find(&self, id: Option<&str>) -> Option<&PinnedKey> {
        match id {
            Some(id) => self.keys.iter().find(|k| k.id.as_deref() == Some(id)),
            None if self.keys.len() == 1 => self.keys.first(),
            None => {
                let mut unnamed = self.keys.iter().filter(|k| k.id.is_none());
                let first = unnamed.next();
                first.filter(|_| unnamed.next().is_none())
            }
        }
    }
}

fn pinned_jwk(jwk: &Jwk) -> Option<PinnedKey> {
    if jwk.common.public_key_use == Some(jsonwebtoken::jwk::PublicKeyUse::Encryption) {
        return None;
    }
    let named = jwk
        .common
        .key_algorithm
        .and_then(|a| a.to_string().parse::<Algorithm>().ok());
    let algorithm = match (&jwk.algorithm, named) {
        (_, Some(algorithm)) => algorithm,
        (AlgorithmParameters::RSA(_), None) => Algorithm::RS256,
        (AlgorithmParameters::EllipticCurve(ec), None) => match ec.curve {
            EllipticCurve::P256 => Algorithm::ES256,
            EllipticCurve::P384 => Algorithm::ES384,
            _ => return None,
        },
        (AlgorithmParameters::OctetKeyPair(_), None) => Algorithm::EdDSA,
        _ => return None,
    };
    let key = DecodingKey::from_jwk(jwk).ok()?;
    // A published `alg` that does not fit the key's type is not trusted either.
    if key.family() != algorithm.family() {
        return None;
    }
    let key = match key.family() {
        AlgorithmFamily::Hmac => SignatureCheck::secret(algorithm, key.try_get_as_bytes().ok()?)?,
        _ => SignatureCheck::PublicKey(key),
    };
    Some(PinnedKey {
        id: jwk.common.key_id.clone(),
        algorithm,
        key,
    })
}

/// A token to try a route with (`trafik token`): who it is for, and what the route expects.
#[derive(Clone, Debug, Default)]
pub struct DemoClaims {
    pub subject: String,
    pub issuer: Option<String>,
    pub audience: Option<String>,
    /// Seconds since the Unix epoch: the token's `iat`; `exp` is `issued_at + lifetime`.
    pub issued_at: u64,
    pub lifetime: u64,
}

/// Signs `claims` with a shared secret (HS256/384/512) or a PEM private key (the others).
pub fn sign(algorithm: Algorithm, key: &[u8], claims: &DemoClaims) -> Result<String, String> {
    use Algorithm::*;
    use jsonwebtoken::EncodingKey;
    let key = match algorithm {
        HS256 | HS384 | HS512 => EncodingKey::from_secret(key),
        RS256 | RS384 | RS512 | PS256 | PS384 | PS512 => EncodingKey::from_rsa_pem(key),
        ES256 | ES384 => EncodingKey::from_ec_pem(key),
        EdDSA => EncodingKey::from_ed_pem(key),
        other => return Err(format!("cannot sign {other:?}")),
    }
    .map_err(|e| format!("not a signing key for {algorithm:?}: {e}"))?;
    let mut body = Map::new();
    body.insert("sub".into(), claims.subject.clone().into());
    if let Some(issuer) = &claims.issuer {
        body.insert("iss".into(), issuer.clone().into());
    }
    if let Some(audience) = &claims.audience {
        body.insert("aud".into(), audience.clone().into());
    }
    body.insert("iat".into(), claims.issued_at.into());
    body.insert(
        "exp".into(),
        claims.issued_at.saturating_add(claims.lifetime).into(),
    );
    jsonwebtoken::encode(&jsonwebtoken::Header::new(algorithm), &body, &key)
        .map_err(|e| format!("cannot sign: {e}"))
}

/// What a route requires of a token besides its signature.
#[derive(Clone, Debug, Default)]
pub struct Expectations {
    /// Accepted issuers (`iss`); empty accepts any.
    pub issuers: Vec<String>,
    /// Accepted audiences (`aud`, one of them); empty does not check `aud`.
    pub audiences: Vec<String>,
    /// Seconds of clock difference allowed on `exp` and `nbf`.
    pub leeway: u64,
}

/// Why a token was refused: the one-line reason trafik answers 401 with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refusal {
    Missing,
    Malformed,
    UnknownKey,
    AlgorithmNotAllowed,
    BadSignature,
    NoExpiry,
    Expired,
    NotYetValid,
    NoIssuer,
    WrongIssuer,
    NoAudience,
    WrongAudience,
}

impl Refusal {
    /// Short, stable, for logs, counters and `WWW-Authenticate`'s `error_description`.
    pub fn reason(self) -> &'static str {
        match self {
            Refusal::Missing => "no bearer token",
            Refusal::Malformed => "malformed token",
            Refusal::UnknownKey => "no key for this token",
            Refusal::AlgorithmNotAllowed => "algorithm not allowed for this key",
            Refusal::BadSignature => "bad signature",
            Refusal::NoExpiry => "token has no exp",
            Refusal::Expired => "token expired",
            Refusal::NotYetValid => "token not yet valid",
            Refusal::NoIssuer => "token has no iss",
            Refusal::WrongIssuer => "wrong issuer",
            Refusal::NoAudience => "token has no aud",
            Refusal::WrongAudience => "wrong audience",
        }
    }
}

/// Verifies `token` against `keys` at `now` (seconds since the Unix epoch) and returns its
/// claims. Each part is decoded and parsed once.
pub fn verify(
    token: &str,
    keys: &KeySet,
    expect: &Expectations,
    now: u64,
) -> Result<Claims, Refusal> {
    verify_forwarding(token, keys, expect, now, &[]).map(|(claims, _)| claims)
}

/// [`verify`], and the text of each claim `forward` names ([`Claims::text`]), read in the same
/// pass over the payload as the claims verification checks.
pub fn verify_forwarding(
    token: &str,
    keys: &KeySet,
    expect: &Expectations,
    now: u64,
    forward: &[String],
) -> Result<(Claims, Vec<Option<String>>), Refusal> {
    let (message, signature) = token.rsplit_once('.').ok_or(Refusal::Malformed)?;
    // `message`, what the signature signs, is `header.payload`.
    let (header, payload) = message.split_once('.').ok_or(Refusal::Malformed)?;
    if payload.contains('.') {
        return Err(Refusal::Malformed);
    }
    // One spelling per part (RFC 7515 §2): the engine refuses `+`, `/`, `=` and a last symbol
    // whose unused bits are not zero, so a token cannot be altered without breaking it. The
    // parts are decoded one after the other into one buffer (decoded, a part takes at most as
    // many bytes as its text), the payload first: it stays, as the claims.
    let mut decoded = Vec::with_capacity(token.len().max(16));
    let mut decode = |part: &str| {
        let start = decoded.len();
        URL_SAFE_NO_PAD
            .decode_vec(part, &mut decoded)
            .map_err(|_| Refusal::Malformed)?;
        Ok(start..decoded.len())
    };
    let (payload, header, signature) = (decode(payload)?, decode(header)?, decode(signature)?);
    let header = JoseHeader::read(&decoded[header]).ok_or(Refusal::Malformed)?;
    let key = keys
        .find(header.kid.as_deref())
        .ok_or(Refusal::UnknownKey)?;
    if header.alg != key.algorithm {
        return Err(Refusal::AlgorithmNotAllowed);
    }
    if !key
        .key
        .verifies(key.algorithm, message.as_bytes(), &decoded[signature])
    {
        return Err(Refusal::BadSignature);
    }
    decoded.truncate(payload.end);
    let claims = Claims { payload: decoded };
    let (expiry, not_before, texts) = {
        let ([exp, nbf, iss, aud], texts) = claims
            .pick(["exp", "nbf", "iss", "aud"], forward)
            .ok_or(Refusal::Malformed)?;
        let time = |claim: Option<Claim>| claim.map(|c| c.whole().ok_or(Refusal::Malformed));
        let expiry = time(exp).ok_or(Refusal::NoExpiry)??;
        let not_before = time(nbf).transpose()?;
        check_issuer(iss.as_ref(), &expect.issuers)?;
        check_audience(aud.as_ref(), &expect.audiences)?;
        (expiry, not_before, texts)
    };
    if expiry.saturating_add(expect.leeway) <= now {
        return Err(Refusal::Expired);
    }
    if not_before.is_some_and(|nbf| nbf > now.saturating_add(expect.leeway)) {
        return Err(Refusal::NotYetValid);
    }
    Ok((claims, texts))
}

/// The JOSE header fields verification reads (RFC 7515 §4.1); others are ignored, a field
/// given twice is refused.
#[derive(Deserialize)]
struct JoseHeader {
    alg: Algorithm,
    kid: Option<String>,
    crit: Option<Vec<String>>,
    b64: Option<bool>,
}

impl JoseHeader {
    /// The header, if it is JSON naming an algorithm and asks for no extension trafik does not
    /// implement: the only one understood is RFC 7797's `b64`, and only as `true` (a payload
    /// that is base64url, as every other token's).
    fn read(json: &[u8]) -> Option<JoseHeader> {
        let header: JoseHeader = serde_json::from_slice(json).ok()?;
        if header.b64 == Some(false) {
            return None;
        }
        match &header.crit {
            None => Some(header),
            Some(crit) if crit.len() == 1 && crit[0] == "b64" && header.b64.is_some() => {
                Some(header)
            }
            Some(_) => None,
        }
    }
}

/// Configured issuers require `iss`, one string among them (RFC 7519 §4.1.1: a StringOrURI).
fn check_issuer(issuer: Option<&Claim>, issuers: &[String]) -> Result<(), Refusal> {
    if issuers.is_empty() {
        return Ok(());
    }
    match issuer {
        None => Err(Refusal::NoIssuer),
        Some(issuer)
            if issuer
                .as_str()
                .is_some_and(|i| issuers.iter().any(|x| x == i)) =>
        {
            Ok(())
        }
        Some(_) => Err(Refusal::WrongIssuer),
    }
}

/// Configured audiences require `aud`: one string, or a list of strings, naming one of them
/// (RFC 7519 §4.1.3).
fn check_audience(audience: Option<&Claim>, audiences: &[String]) -> Result<(), Refusal> {
    if audiences.is_empty() {
        return Ok(());
    }
    let named = match audience {
        None => return Err(Refusal::NoAudience),
        Some(Claim::List(list)) => list.as_slice(),
        Some(one) => std::slice::from_ref(one),
    };
    let accepted = |value: &Claim| {
        value
            .as_str()
            .is_some_and(|a| audiences.iter().any(|x| x == a))
    };
    if named.iter().all(|value| value.as_str().is_some()) && named.iter().any(accepted) {
        Ok(())
    } else {
        Err(Refusal::WrongAudience)
    }
}

/// A verified token's claims: its payload, a JSON object, read again for the claims a route
/// forwards or counts by. Each read is one pass over it that keeps only the values asked for,
/// so a token's other claims cost no allocation; of a claim given twice the last counts, as
/// RFC 7519 §4 allows.
#[derive(Debug)]
pub struct Claims {
    payload: Vec<u8>,
}

impl Claims {
    /// A claim's value as a header value's text: strings as they are, numbers and booleans
    /// written out; objects, arrays and null are not forwarded.
    pub fn text(&self, name: &str) -> Option<String> {
        let ([value], _) = self.pick([name], &[])?;
        value?.text()
    }

    /// The values of the claims `names`, `None` where absent, and the text of those `texts`
    /// names; `None` for a payload that is not a JSON object.
    fn pick<const N: usize>(&self, names: [&str; N], texts: &[String]) -> Option<Picks<'_, N>> {
        use serde::de::DeserializeSeed;
        let mut reader = serde_json::Deserializer::from_slice(&self.payload);
        let values = Picked { names, texts }.deserialize(&mut reader).ok()?;
        // Nothing but white space after the object.
        reader.end().ok()?;
        Some(values)
    }
}

/// A claim's value as it is checked and forwarded: a string without escapes is borrowed from
/// the payload and a whole number read as one, so the claims a token usually has cost no
/// allocation; other values are read as a `serde_json::Value` would hold them.
enum Claim<'p> {
    Text(Cow<'p, str>),
    /// A number that is a whole one in `u64`.
    Whole(u64),
    /// Any other number, as `serde_json` writes it.
    Number(String),
    Bool(bool),
    List(Vec<Claim<'p>>),
    /// `null` or an object.
    Other,
}

impl Claim<'_> {
    /// As a header value's text (see [`Claims::text`]).
    fn text(&self) -> Option<String> {
        match self {
            Claim::Text(text) => Some(text.as_ref().to_owned()),
            Claim::Whole(number) => Some(number.to_string()),
            Claim::Number(number) => Some(number.clone()),
            Claim::Bool(flag) => Some(flag.to_string()),
            Claim::List(_) | Claim::Other => None,
        }
    }

    fn as_str(&self) -> Option<&str> {
        match self {
            Claim::Text(text) => Some(text),
            _ => None,
        }
    }

    /// The claim as a time (seconds since the epoch): a whole number, as `Value::as_u64`
    /// reads one.
    fn whole(&self) -> Option<u64> {
        match self {
            Claim::Whole(number) => Some(*number),
            Claim::Number(number) => number.parse().ok(),
            _ => None,
        }
    }
}

impl<'de> Deserialize<'de> for Claim<'de> {
    fn deserialize<D: serde::Deserializer<'de>>(reader: D) -> Result<Self, D::Error> {
        reader.deserialize_any(ClaimVisitor)
    }
}

struct ClaimVisitor;

impl<'de> serde::de::Visitor<'de> for ClaimVisitor {
    type Value = Claim<'de>;

    fn expecting(&self, formatter: &mut std::fmt::Formatter) -> std::fmt::Result {
        formatter.write_str("a claim's value")
    }

    fn visit_borrowed_str<E: serde::de::Error>(self, text: &'de str) -> Result<Self::Value, E> {
        Ok(Claim::Text(Cow::Borrowed(text)))
    }

    fn visit_str<E: serde::de::Error>(self, text: &str) -> Result<Self::Value, E> {
        Ok(Claim::Text(Cow::Owned(text.to_owned())))
    }

    fn visit_u64<E: serde::de::Error>(self, number: u64) -> Result<Self::Value, E> {
        Ok(Claim::Whole(number))
    }

    fn visit_i64<E: serde::de::Error>(self, number: i64) -> Result<Self::Value, E> {
        Ok(match u64::try_from(number) {
            Ok(number) => Claim::Whole(number),
            Err(_) => Claim::Number(number.to_string()),
        })
    }

    fn visit_bool<E: serde::de::Error>(self, flag: bool) -> Result<Self::Value, E> {
        Ok(Claim::Bool(flag))
    }

    fn visit_unit<E: serde::de::Error>(self) -> Result<Self::Value, E> {
        Ok(Claim::Other)
    }

    fn visit_seq<A: serde::de::SeqAccess<'de>>(
        self,
        mut items: A,
    ) -> Result<Self::Value, A::Error> {
        let mut list = Vec::new();
        while let Some(item) = items.next_element()? {
            list.push(item);
        }
        Ok(Claim::List(list))
    }

    /// An object; or, with `serde_json`'s `arbitrary_precision` (on in this build), a number
    /// that is no `u64` or `i64`, which it hands over as a map only `Value` reads.
    fn visit_map<A: serde::de::MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
        let value = Value::deserialize(serde::de::value::MapAccessDeserializer::new(map))?;
        Ok(match value {
            Value::Number(number) => Claim::Number(number.to_string()),
            _ => Claim::Other,
        })
    }
}

/// What [`Claims::pick`] read: the values of the claims named, the texts of the others asked.
type Picks<'p, const N: usize> = ([Option<Claim<'p>>; N], Vec<Option<String>>);

/// Reads a JSON object keeping the values of the fields named, and the text of those named in
/// `texts` (see [`Claims::pick`]).
struct Picked<'n, const N: usize> {
    names: [&'n str; N],
    texts: &'n [String],
}

impl<'de, const N: usize> serde::de::DeserializeSeed<'de> for Picked<'_, N> {
    type Value = Picks<'de, N>;

    fn deserialize<D: serde::Deserializer<'de>>(self, reader: D) -> Result<Self::Value, D::Error> {
        reader.deserialize_map(self)
    }
}

impl<'de, const N: usize> serde::de::Visitor<'de> for Picked<'_, N> {
    type Value = Picks<'de, N>;

    fn expecting(&self, formatter: &mut std::fmt::Formatter) -> std::fmt::Result {
        formatter.write_str("a JSON object of claims")
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut values = [const { None }; N];
        let mut texts = vec![None; self.texts.len()];
        let among = || NameAmong {
            names: &self.names,
            texts: self.texts,
        };
        while let Some((name, text)) = map.next_key_seed(among())? {
            if name.is_none() && text.is_none() {
                map.next_value::<serde::de::IgnoredAny>()?;
                continue;
            }
            let value: Claim = map.next_value()?;
            if let Some(first) = text {
                // A claim may be forwarded in more than one field.
                let asked = &self.texts[first];
                for (slot, _) in (texts.iter_mut().zip(self.texts))
                    .skip(first)
                    .filter(|(_, name)| *name == asked)
                {
                    *slot = value.text();
                }
            }
            if let Some(index) = name {
                values[index] = Some(value);
            }
        }
        Ok((values, texts))
    }
}

/// A field name, read as the index of the name it equals among `names`, and the first among
/// `texts`, if any: compared where it lies in the input, not copied.
struct NameAmong<'a, 'n, const N: usize> {
    names: &'a [&'n str; N],
    texts: &'a [String],
}

impl<'de, const N: usize> serde::de::DeserializeSeed<'de> for NameAmong<'_, '_, N> {
    type Value = (Option<usize>, Option<usize>);

    fn deserialize<D: serde::Deserializer<'de>>(self, reader: D) -> Result<Self::Value, D::Error> {
        reader.deserialize_str(self)
    }
}

impl<'de, const N: usize> serde::de::Visitor<'de> for NameAmong<'_, '_, N> {
    type Value = (Option<usize>, Option<usize>);

    fn expecting(&self, formatter: &mut std::fmt::Formatter) -> std::fmt::Result {
        formatter.write_str("a claim's name")
    }

    fn visit_str<E: serde::de::Error>(self, name: &str) -> Result<Self::Value, E> {
        Ok((
            self.names.iter().position(|asked| *asked == name),
            self.texts.iter().position(|asked| asked == name),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use jsonwebtoken::{EncodingKey, Header, encode};
    use serde_json::json;

    const NOW: u64 = 1_800_000_000;
    const SECRET: &[u8] = b"trafik-ornek-anahtar";

    fn hs256(claims: Value) -> String {
        encode(
            &Header::new(Algorithm::HS256),
            &claims,
            &EncodingKey::from_secret(SECRET).unwrap(),
        )
        .unwrap()
    }

    fn keys() -> KeySet {
        KeySet::new(vec![PinnedKey::secret(Algorithm::HS256, SECRET).unwrap()])
    }

    fn expect() -> Expectations {
        Expectations {
            issuers: vec!["trafik-ornek".into()],
            audiences: vec!["takip".into()],
            leeway: 5,
        }
    }

    fn claims(exp: u64) -> Value {
        json!({"sub": "M7", "iss": "trafik-ornek", "aud": "takip", "exp": exp})
    }

    #[test]
    fn a_signed_demo_token_passes_the_route_it_was_made_for() {
        let demo = DemoClaims {
            subject: "M7".into(),
            issuer: Some("trafik-ornek".into()),
            audience: Some("takip".into()),
            issued_at: NOW,
            lifetime: 60,
        };
        let token = sign(Algorithm::HS256, SECRET, &demo).unwrap();
        let claims = verify(&token, &keys(), &expect(), NOW + 59).unwrap();
        assert_eq!(claims.text("sub").as_deref(), Some("M7"));
        assert_eq!(
            verify(&token, &keys(), &expect(), NOW + 65).err(),
            Some(Refusal::Expired)
        );
        let wrong_secret = sign(Algorithm::HS256, b"baska", &demo).unwrap();
        assert_eq!(
            verify(&wrong_secret, &keys(), &expect(), NOW).err(),
            Some(Refusal::BadSignature)
        );
        assert!(sign(Algorithm::RS256, b"not a pem", &demo).is_err());
    }

    #[test]
    fn a_valid_token_yields_its_claims() {
        let claims = verify(&hs256(claims(NOW + 60)), &keys(), &expect(), NOW).unwrap();
        assert_eq!(claims.text("sub").as_deref(), Some("M7"));
    }

    /// A token signed over a payload written by hand, for payloads no serializer writes.
    fn hs256_raw(payload: &str) -> String {
        let header = URL_SAFE_NO_PAD.encode(br#"{"alg":"HS256","typ":"JWT"}"#);
        let payload = URL_SAFE_NO_PAD.encode(payload);
        let mut mac = Hmac::<Sha256>::new_from_slice(SECRET).unwrap();
        mac.update(format!("{header}.{payload}").as_bytes());
        let signature = URL_SAFE_NO_PAD.encode(mac.finalize().into_bytes());
        format!("{header}.{payload}.{signature}")
    }

    #[test]
    fn claims_are_read_as_json_reads_them() {
        let open = Expectations::default();
        let exp = NOW + 60;
        // An escaped name is the name; of a claim given twice the last counts.
        let token = hs256_raw(&format!(
            r#"{{"s\u0075b":"M1","sub":"M7","exp":{exp},"n":42,"b":true,"o":{{"sub":"x"}}}}"#
        ));
        let claims = verify(&token, &keys(), &open, NOW).unwrap();
        assert_eq!(claims.text("sub").as_deref(), Some("M7"));
        assert_eq!(claims.text("n").as_deref(), Some("42"));
        assert_eq!(claims.text("b").as_deref(), Some("true"));
        assert_eq!(claims.text("o"), None, "objects are not forwarded");
        assert_eq!(claims.text("missing"), None);
        // Numbers as written, escaped text unescaped; lists and null are not forwarded.
        let token = hs256_raw(&format!(
            r#"{{"exp":{exp},"f":1.50,"neg":-3,"big":18446744073709551616,"e":"a\u0062","l":["a"],"z":null}}"#
        ));
        let claims = verify(&token, &keys(), &open, NOW).unwrap();
        assert_eq!(claims.text("f").as_deref(), Some("1.50"));
        assert_eq!(claims.text("neg").as_deref(), Some("-3"));
        assert_eq!(claims.text("big").as_deref(), Some("18446744073709551616"));
        assert_eq!(claims.text("e").as_deref(), Some("ab"));
        assert_eq!(claims.text("l"), None);
        assert_eq!(claims.text("z"), None);
        // A later `exp` decides.
        let token = hs256_raw(&format!(r#"{{"exp":{exp},"exp":{}}}"#, NOW - 60));
        assert_eq!(
            verify(&token, &keys(), &open, NOW).err(),
            Some(Refusal::Expired)
        );
        for payload in [
            format!(r#"[{exp}]"#),
            format!(r#"{{"exp":{exp}}} x"#),
            format!(r#"{{"exp":"{exp}"}}"#),
            r#"{"exp":1.8e9}"#.to_owned(),
            r#"{"exp":-0}"#.to_owned(),
            r#"{"exp":18446744073709551616}"#.to_owned(),
            format!(r#"{{"exp":{exp},"nbf":"soon"}}"#),
        ] {
            assert_eq!(
                verify(&hs256_raw(&payload), &keys(), &open, NOW).err(),
                Some(Refusal::Malformed),
                "{payload}"
            );
        }
        assert_eq!(
            verify(&hs256_raw(r#"{"sub":"M7"}"#), &keys(), &open, NOW).err(),
            Some(Refusal::NoExpiry)
        );
    }

    #[test]
    fn forwarded_claims_are_read_in_the_pass_that_checks_the_token() {
        let exp = NOW + 60;
        let token = hs256_raw(&format!(
            r#"{{"sub":"M1","iss":"trafik-ornek","aud":"takip","exp":{exp},"sub":"M7","n":4}}"#
        ));
        let forward = ["sub", "iss", "missing", "sub", "exp", "aud"].map(String::from);
        let (claims, texts) = verify_forwarding(&token, &keys(), &expect(), NOW, &forward).unwrap();
        let texts: Vec<Option<&str>> = texts.iter().map(Option::as_deref).collect();
        let exp = exp.to_string();
        assert_eq!(
            texts,
            [
                Some("M7"),
                Some("trafik-ornek"),
                None,
                Some("M7"),
                Some(exp.as_str()),
                Some("takip")
            ]
        );
        for (name, text) in forward.iter().zip(&texts) {
            assert_eq!(claims.text(name).as_deref(), *text, "{name}");
        }
        assert_eq!(
            verify_forwarding(&token, &keys(), &expect(), NOW + 65, &forward).err(),
            Some(Refusal::Expired)
        );
    }

    #[test]
    fn expiry_and_not_before_allow_the_leeway_and_no_more() {
        assert!(verify(&hs256(claims(NOW - 4)), &keys(), &expect(), NOW).is_ok());
        assert_eq!(
            verify(&hs256(claims(NOW - 5)), &keys(), &expect(), NOW).err(),
            Some(Refusal::Expired)
        );
        let mut early = claims(NOW + 60);
        early["nbf"] = json!(NOW + 5);
        assert!(verify(&hs256(early.clone()), &keys(), &expect(), NOW).is_ok());
        early["nbf"] = json!(NOW + 6);
        assert_eq!(
            verify(&hs256(early), &keys(), &expect(), NOW).err(),
            Some(Refusal::NotYetValid)
        );
    }

    #[test]
    fn issuer_audience_and_expiry_are_required() {
        let mut other = claims(NOW + 60);
        other["iss"] = json!("baska");
        assert_eq!(
            verify(&hs256(other), &keys(), &expect(), NOW).err(),
            Some(Refusal::WrongIssuer)
        );
        let mut other = claims(NOW + 60);
        other["aud"] = json!("ucret");
        assert_eq!(
            verify(&hs256(other), &keys(), &expect(), NOW).err(),
            Some(Refusal::WrongAudience)
        );
        let mut other = claims(NOW + 60);
        other.as_object_mut().unwrap().remove("exp");
        assert_eq!(
            verify(&hs256(other), &keys(), &expect(), NOW).err(),
            Some(Refusal::NoExpiry)
        );
    }

    #[test]
    fn a_configured_issuer_and_audience_must_be_in_the_token() {
        let mut no_issuer = claims(NOW + 60);
        no_issuer.as_object_mut().unwrap().remove("iss");
        assert_eq!(
            verify(&hs256(no_issuer), &keys(), &expect(), NOW).err(),
            Some(Refusal::NoIssuer)
        );
        let mut no_audience = claims(NOW + 60);
        no_audience.as_object_mut().unwrap().remove("aud");
        assert_eq!(
            verify(&hs256(no_audience), &keys(), &expect(), NOW).err(),
            Some(Refusal::NoAudience)
        );
        let bare = json!({"sub": "M7", "exp": NOW + 60});
        assert!(verify(&hs256(bare.clone()), &keys(), &expect(), NOW).is_err());
        // Without expectations, neither claim is needed.
        let open = Expectations {
            leeway: 5,
            ..Expectations::default()
        };
        assert!(verify(&hs256(bare), &keys(), &open, NOW).is_ok());
    }

    #[test]
    fn the_issuer_is_one_string_and_the_audience_may_be_a_list() {
        let mut listed = claims(NOW + 60);
        listed["iss"] = json!(["trafik-ornek"]);
        assert_eq!(
            verify(&hs256(listed), &keys(), &expect(), NOW).err(),
            Some(Refusal::WrongIssuer)
        );
        let mut audiences = claims(NOW + 60);
        audiences["aud"] = json!(["ucret", "takip"]);
        assert!(verify(&hs256(audiences), &keys(), &expect(), NOW).is_ok());
        let mut strange = claims(NOW + 60);
        strange["aud"] = json!(["ucret", 7]);
        assert_eq!(
            verify(&hs256(strange), &keys(), &expect(), NOW).err(),
            Some(Refusal::WrongAudience)
        );
    }

    /// Each part has one spelling: base64url without padding, its unused last bits zero.
    #[test]
    fn only_the_one_base64url_spelling_of_each_part_is_read() {
        // A token whose signature has a `-` or `_`, which standard base64 spells `+` or `/`.
        let token = (60..)
            .map(|ahead| hs256(claims(NOW + ahead)))
            .find(|token| token.rsplit('.').next().unwrap().contains(['-', '_']))
            .unwrap();
        assert!(verify(&token, &keys(), &expect(), NOW).is_ok());
        let parts: Vec<&str> = token.split('.').collect();
        let mut respellings = Vec::new();
        for index in [2, 0, 1] {
            let standard = parts[index].replace('-', "+").replace('_', "/");
            if standard != parts[index] {
                respellings.push((index, standard));
            }
            let padding = "=".repeat((4 - parts[index].len() % 4) % 4);
            if !padding.is_empty() {
                respellings.push((index, format!("{}{padding}", parts[index])));
            }
            // The last symbol of a part whose length is not a multiple of 4 carries unused bits;
            // setting one spells the same bytes differently.
            if !parts[index].len().is_multiple_of(4) {
                let (body, last) = parts[index].split_at(parts[index].len() - 1);
                let alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
                let value = alphabet.find(last).unwrap();
                let bumped = alphabet.as_bytes()[value | 1] as char;
                if value | 1 != value {
                    respellings.push((index, format!("{body}{bumped}")));
                }
            }
        }
        for (index, part) in respellings {
            let mut respelled = parts.clone();
            respelled[index] = &part;
            let respelled = respelled.join(".");
            assert_eq!(
                verify(&respelled, &keys(), &expect(), NOW).err(),
                Some(Refusal::Malformed),
                "part {index} respelled: {respelled}"
            );
        }
    }

    #[test]
    fn none_and_another_algorithm_than_the_pinned_one_are_refused() {
        let token = hs256(claims(NOW + 60));
        let payload = token.split('.').nth(1).unwrap();
        // {"alg":"none","typ":"JWT"}
        let none = format!("eyJhbGciOiJub25lIiwidHlwIjoiSldUIn0.{payload}.");
        assert_eq!(
            verify(&none, &keys(), &expect(), NOW).err(),
            Some(Refusal::Malformed)
        );
        let hs384 = encode(
            &Header::new(Algorithm::HS384),
            &claims(NOW + 60),
            &EncodingKey::from_secret(SECRET).unwrap(),
        )
        .unwrap();
        assert_eq!(
            verify(&hs384, &keys(), &expect(), NOW).err(),
            Some(Refusal::AlgorithmNotAllowed)
        );
    }

    #[test]
    fn a_tampered_payload_breaks_the_signature() {
        let token = hs256(claims(NOW + 60));
        let mut parts: Vec<&str> = token.split('.').collect();
        let forged =
            hs256(json!({"sub": "M3", "iss": "trafik-ornek", "aud": "takip", "exp": NOW + 60}));
        parts[1] = forged.split('.').nth(1).unwrap();
        assert_eq!(
            verify(&parts.join("."), &keys(), &expect(), NOW).err(),
            Some(Refusal::BadSignature)
        );
    }

    #[test]
    fn jwks_keys_are_pinned_and_chosen_by_kid() {
        let set = KeySet::from_jwks(
            r#"{"keys":[
                {"kty":"oct","kid":"a","alg":"HS256","k":"dHJhZmlrLW9ybmVrLWFuYWh0YXI"},
                {"kty":"oct","kid":"b","k":"eA"},
                {"kty":"RSA","kid":"r","use":"enc","n":"AQAB","e":"AQAB"}
            ]}"#,
        )
        .unwrap();
        assert_eq!(set.len(), 1, "oct without alg and enc keys are skipped");
        let mut header = Header::new(Algorithm::HS256);
        header.kid = Some("a".into());
        let token = encode(
            &header,
            &claims(NOW + 60),
            &EncodingKey::from_secret(SECRET).unwrap(),
        )
        .unwrap();
        assert!(verify(&token, &set, &expect(), NOW).is_ok());
        header.kid = Some("z".into());
        let token = encode(
            &header,
            &claims(NOW + 60),
            &EncodingKey::from_secret(SECRET).unwrap(),
        )
        .unwrap();
        assert_eq!(
            verify(&token, &set, &expect(), NOW).err(),
            Some(Refusal::UnknownKey)
        );
        assert!(KeySet::from_jwks(r#"{"keys":[]}"#).is_err());
        assert!(KeySet::from_jwks("not json").is_err());
    }
}
