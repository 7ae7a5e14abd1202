//! Static routes: files under a directory, served by trafik itself. The path after the route's
//! prefix names a file under the root; a directory answers with its index file. Paths that
//! resolve outside the root (through `..`, its encodings, or a symlink) are refused with 404
//! before anything is read, a NUL with 400. Answers carry `ETag` and `Last-Modified` (304 to a
//! matching conditional request), `Content-Type` by extension and `Accept-Ranges` (a single
//! range gets 206, an unsatisfiable one 416).
//!
//! File system calls run on tokio's blocking pool, never on a worker. Files are kept open (a
//! `trafik-cache` store shared by the workers) and checked against the disk at most once a
//! second, by one `stat`: a file replaced or changed on disk is opened and read anew, one found
//! as it was is kept (if it was read a second or more after its last change, so that its
//! modification time tells). The body is a region of the open file
//! ([`FileRegion`]): the own HTTP/1 engine on plain TCP sends it with sendfile(2), any other
//! writer (TLS, HTTP/2, HTTP/3, a compressing route) reads it as bytes, from the copy kept in
//! memory for a small file, in chunks read on the blocking pool for a larger one.

use std::borrow::Cow;
use std::ffi::OsStr;
use std::io::Read;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime};

use bytes::Bytes;
use http::{HeaderMap, HeaderName, HeaderValue, Method, Response, StatusCode, header};
use percent_encoding::percent_decode_str;
use trafik_cache::{Limits, Policy, Store, Weigh};

use super::body::{FileRegion, HeldAnswer, ProxyBody, SendfileCount};
use super::conditional::{not_modified, range_applies};
use super::filter::Fields;
use super::path::escapes_are_well_formed;
use crate::counters::{PerWorker, add, bump, read};
use crate::descriptors::{KeptFile, ran_out};

/// Files up to this size are also kept in memory, for writers that cannot send files.
const SMALL_FILE: u64 = 1 << 20;
/// The memory all kept files of one site may take.
const KEPT_BYTES: u64 = 64 << 20;
/// A kept file is checked against the disk again after this many nanoseconds (a second).
const RECHECK: u64 = 1_000_000_000;

/// How long before it was read a file must have been last modified for its modification time
/// to tell a later write: a write in the same timestamp tick as the read would not change it,
/// and file systems count in ticks of up to a second (two for FAT, which is not trusted).
const SETTLED: Duration = Duration::from_secs(1);

/// What a static route counts, per worker.
#[derive(Debug, Default)]
pub struct SiteCounters {
    pub requests: AtomicU64,
    /// Body bytes sent.
    pub bytes: AtomicU64,
    /// Body bytes sent with sendfile(2), without copying them (counted by the writer).
    pub sent_by_sendfile: AtomicU64,
    pub not_modified: AtomicU64,
    pub not_found: AtomicU64,
}

impl SendfileCount for PerWorker<SiteCounters> {
    fn sent_by_sendfile(&self, worker: usize, bytes: u64) {
        add(&self.mine(worker).sent_by_sendfile, bytes as usize);
    }
}

/// One static route's directory, its kept files and counters; kept across reloads that leave
/// the route's settings alone.
pub struct Site {
    pub root: PathBuf,
    /// The root with symlinks resolved: every file served resolves under it.
    canonical: PathBuf,
    pub index: Option<String>,
    /// The route's path prefix, taken off the request path.
    pub prefix: String,
    pub counters: Arc<PerWorker<SiteCounters>>,
    /// By the decoded path under the prefix ([`Relative`]).
    kept: Store<Vec<u8>, Arc<File>>,
    /// What kept files' check times count from.
    began: Instant,
}

/// A file as last seen on disk, kept open.
struct File {
    opened: Arc<std::fs::File>,
    len: u64,
    /// The fields of the whole file's 200, made once: the own engine writes them as they are,
    /// a `Response` for the pipeline takes a copy.
    whole: HeaderMap,
    etag: HeaderValue,
    last_modified: HeaderValue,
    modified: SystemTime,
    content_type: HeaderValue,
    /// The whole file, for a small one.
    body: Option<Bytes>,
    /// Where it was found, and which file it was there ([`File::is_at`]).
    path: PathBuf,
    device: u64,
    inode: u64,
    /// Last modified at least [`SETTLED`] before it was read: only then does an unchanged
    /// modification time say the file is unchanged.
    settled: bool,
    /// When it was last found on disk as it is kept, in nanoseconds from its site's start.
    checked: AtomicU64,
    /// Its place in the descriptor budget, when it is kept for the next requests.
    kept: Option<KeptFile>,
}

impl File {
    /// Whether `path` is still this file as it was read: the same path, inode, length and
    /// modification time, the last one to be trusted. One `stat` instead of opening and
    /// reading the file again.
    fn is_at(&self, path: &Path) -> bool {
        self.settled
            && self.path == path
            && std::fs::metadata(path).is_ok_and(|now| {
                (now.dev(), now.ino(), now.len()) == (self.device, self.inode, self.len)
                    && now
                        .modified()
                        .is_ok_and(|modified| modified == self.modified)
            })
    }
}

/// A file looked up for a request: the kept one, found unchanged on disk, or read anew.
enum LookedUp {
    Same(Arc<File>),
    New(Box<File>),
}

impl Weigh for File {
    fn bytes(&self) -> u64 {
        self.body.as_ref().map_or(0, |b| b.len() as u64) + 256
    }
}

/// Why no file answers.
enum Refusal {
    BadPath,
    NotFound,
    /// The file could not be opened for want of a descriptor: trafik's trouble, not a 404.
    NoDescriptor,
}

impl Site {
    pub fn new(
        root: PathBuf,
        index: Option<String>,
        prefix: String,
        workers: usize,
    ) -> Result<Site, String> {
        let canonical = std::fs::canonicalize(&root)
            .map_err(|e| format!("static root {}: {e}", root.display()))?;
        if !canonical.is_dir() {
            return Err(format!("static root {} is not a directory", root.display()));
        }
        Ok(Site {
            root,
            canonical,
            index,
            prefix,
            counters: Arc::new(PerWorker::new(workers)),
            kept: Store::new(
                Policy::Admission,
                Limits {
                    max_entries: 4096,
                    max_bytes: KEPT_BYTES,
                },
            ),
            began: Instant::now(),
        })
    }

    /// Whether this site serves what `other` describes, so it may carry over a reload.
    pub fn same_as(&self, root: &Path, index: &Option<String>, prefix: &str) -> bool {
        self.root == root && self.index == *index && self.prefix == prefix
    }

    pub fn total(&self, counter: fn(&SiteCounters) -> &AtomicU64) -> i64 {
        self.counters.sum(|c| read(counter(c)))
    }

    /// What a request for `path` would get, told without counting it or keeping the file
    /// (`trafik explain`): the status and the file that answers, or why none does.
    pub fn explain(&self, method: &Method, path: &str) -> (u16, String) {
        if method != Method::GET && method != Method::HEAD {
            return (405, "static files answer GET and HEAD only".into());
        }
        let found = relative_path(path, &self.prefix).and_then(|relative| {
            locate(&self.canonical, &relative.to_path(), self.index.as_deref())
        });
        match found {
            Ok(path) if path.is_file() => (200, format!("the file {}", path.display())),
            Err(Refusal::BadPath) => (400, "the path cannot name a file".into()),
            Err(Refusal::NoDescriptor) => (503, "no file descriptor is left to open it".into()),
            Ok(_) | Err(Refusal::NotFound) => (
                404,
                format!("no file for this path under {}", self.root.display()),
            ),
        }
    }

    /// Answers `method` for `path` (normalized, without the query), with the request's
    /// conditional and range fields read from `fields`, whichever engine read it.
    pub async fn serve(
        &self,
        worker: usize,
        method: &Method,
        path: &str,
        fields: &dyn Fields,
    ) -> FileAnswer {
        let counters = self.counters.mine(worker);
        bump(&counters.requests);
        if method != Method::GET && method != Method::HEAD {
            let mut response = plain(StatusCode::METHOD_NOT_ALLOWED, "use GET or HEAD\n");
            response
                .headers_mut()
                .insert(header::ALLOW, HeaderValue::from_static("GET, HEAD"));
            return FileAnswer::Built(response);
        }
        let file = match self.file(path).await {
            Ok(file) => file,
            Err(Refusal::BadPath) => {
                return FileAnswer::Built(plain(StatusCode::BAD_REQUEST, "bad path\n"));
            }
            Err(Refusal::NoDescriptor) => {
                let refused = plain(StatusCode::SERVICE_UNAVAILABLE, "no file descriptor left\n");
                return FileAnswer::Built(refused);
            }
            Err(Refusal::NotFound) => {
                bump(&counters.not_found);
                return FileAnswer::Built(plain(StatusCode::NOT_FOUND, "not found\n"));
            }
        };
        let sendfile = Sendfile {
            counters: &self.counters,
            worker,
        };
        let answer = answer(&file, fields, method == Method::HEAD, sendfile);
        match answer.body_bytes() {
            Some(bytes) => add(&counters.bytes, bytes as usize),
            None if answer.status() == StatusCode::NOT_MODIFIED => bump(&counters.not_modified),
            None => {}
        }
        answer
    }

    /// The file a request path names: kept, or looked up on disk (off the worker).
    async fn file(&self, path: &str) -> Result<Arc<File>, Refusal> {
        let relative = relative_path(path, &self.prefix)?;
        let now = self.began.elapsed().as_nanos() as u64;
        let kept = match self.kept.get(&*relative.0) {
            Some(file) if now.saturating_sub(file.checked.load(Ordering::Relaxed)) < RECHECK => {
                return Ok(file);
            }
            kept => kept,
        };
        let canonical = self.canonical.clone();
        let index = self.index.clone();
        let wanted = relative.to_path();
        let was_kept = kept.is_some();
        let looked_up =
            tokio::task::spawn_blocking(move || look_up(&canonical, &wanted, index, kept, now))
                .await
                .map_err(|_| Refusal::NotFound)?;
        let mut found = match looked_up {
            Ok(LookedUp::Same(file)) => {
                file.checked.store(now, Ordering::Relaxed);
                return Ok(file);
            }
            Ok(LookedUp::New(file)) => *file,
            // A kept file that is gone is closed now (a deleted file's blocks are freed only
            // then), not when the store happens to evict it.
            Err(refusal) => {
                if was_kept {
                    self.kept.remove(&*relative.0);
                }
                return Err(refusal);
            }
        };
        // Kept while the kept files' share of descriptors has room; past it, closed with
        // its answer (and a stale copy it replaces is let go).
        found.kept = KeptFile::take();
        let found = Arc::new(found);
        match found.kept {
            Some(_) => self.kept.insert(relative.0.into_owned(), found.clone()),
            None => drop(self.kept.remove(&*relative.0)),
        }
        Ok(found)
    }
}

/// The part of a request path after a route's prefix, percent-decoded: the key of a kept file,
/// and the file's path under the root when it is looked up on disk.
struct Relative<'a>(Cow<'a, [u8]>);

impl Relative<'_> {
    fn to_path(&self) -> PathBuf {
        self.0
            .split(|&b| b == b'/')
            .filter(|segment| !segment.is_empty())
            .map(OsStr::from_bytes)
            .collect()
    }
}

/// The path under the root that a request path names: the part after the route's prefix,
/// percent-decoded (borrowed when nothing is escaped). `..` and `.` segments (however they
/// were spelled) never get here, since request paths are normalized before routing; they are
/// refused again all the same.
fn relative_path<'a>(path: &'a str, prefix: &str) -> Result<Relative<'a>, Refusal> {
    let rest = path.strip_prefix(prefix).ok_or(Refusal::NotFound)?;
    // Most paths escape nothing: they are their own decoding, with no scan for escapes.
    let decoded: Cow<[u8]> = match rest.as_bytes().contains(&b'%') {
        false => Cow::Borrowed(rest.as_bytes()),
        true if escapes_are_well_formed(rest.as_bytes()) => percent_decode_str(rest).into(),
        true => return Err(Refusal::BadPath),
    };
    if decoded.contains(&0) {
        return Err(Refusal::BadPath);
    }
    let mut segments = decoded.split(|&b| b == b'/');
    if segments.any(|segment| segment == b"." || segment == b"..") {
        return Err(Refusal::NotFound);
    }
    Ok(Relative(decoded))
}

/// The file `relative` names under `root`, symlinks resolved (a directory's `index` file);
/// nothing outside the root.
fn locate(root: &Path, relative: &Path, index: Option<&str>) -> Result<PathBuf, Refusal> {
    let inside = |path: &Path| -> Result<PathBuf, Refusal> {
        let resolved = std::fs::canonicalize(path).map_err(|_| Refusal::NotFound)?;
        if resolved.starts_with(root) {
            Ok(resolved)
        } else {
            Err(Refusal::NotFound)
        }
    };
    let path = inside(&root.join(relative))?;
    if path.is_dir() {
        let index = index.ok_or(Refusal::NotFound)?;
        return inside(&path.join(index));
    }
    Ok(path)
}

/// Resolves `relative` under `root` (symlinks included): the `kept` file when it is still
/// there unchanged, else what a response needs, read anew (`now` its check time). Runs on the
/// blocking pool.
fn look_up(
    root: &Path,
    relative: &Path,
    index: Option<String>,
    kept: Option<Arc<File>>,
    now: u64,
) -> Result<LookedUp, Refusal> {
    let path = locate(root, relative, index.as_deref())?;
    if let Some(kept) = kept
        && kept.is_at(&path)
    {
        return Ok(LookedUp::Same(kept));
    }
    let mut file = std::fs::File::open(&path).map_err(|error| match ran_out(&error) {
        true => Refusal::NoDescriptor,
        false => Refusal::NotFound,
    })?;
    let metadata = file.metadata().map_err(|_| Refusal::NotFound)?;
    if !metadata.is_file() {
        return Err(Refusal::NotFound);
    }
    let len = metadata.len();
    let modified = metadata.modified().unwrap_or(SystemTime::UNIX_EPOCH);
    let settled = SystemTime::now()
        .duration_since(modified)
        .is_ok_and(|age| age >= SETTLED);
    let since_epoch = modified
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap_or_default();
    let body = if len <= SMALL_FILE {
        let mut bytes = Vec::with_capacity(len as usize);
        file.read_to_end(&mut bytes)
            .map_err(|_| Refusal::NotFound)?;
        Some(Bytes::from(bytes))
    } else {
        None
    };
    let len = body.as_ref().map_or(len, |b| b.len() as u64);
    let etag = format!("\"{len:x}-{:x}\"", since_epoch.as_nanos());
    let content_type = mime_guess::from_path(&path)
        .first_raw()
        .map(|mime| match mime {
            "text/html"
            | "text/css"
            | "text/plain"
            | "text/javascript"
            | "application/javascript" => {
                format!("{mime}; charset=utf-8")
            }
            other => other.to_owned(),
        })
        .unwrap_or_else(|| "application/octet-stream".to_owned());
    let etag = HeaderValue::from_str(&etag).expect("hex and quotes");
    let last_modified = HeaderValue::from_str(&httpdate::fmt_http_date(http_datable(modified)))
        .expect("an HTTP date");
    let content_type = HeaderValue::from_str(&content_type)
        .unwrap_or(HeaderValue::from_static("application/octet-stream"));
    let mut whole = validators(&etag, &last_modified, 2);
    whole.append(header::CONTENT_TYPE, content_type.clone());
    whole.append(header::CONTENT_LENGTH, HeaderValue::from(len));
    Ok(LookedUp::New(Box::new(File {
        opened: Arc::new(file),
        len,
        whole,
        etag,
        last_modified,
        modified,
        content_type,
        body,
        device: metadata.dev(),
        inode: metadata.ino(),
        path,
        settled,
        checked: AtomicU64::new(now),
        kept: None,
    })))
}

/// `modified` within what an HTTP date can say, 1970 to 9999 (`httpdate` panics outside): a
/// file's time can be anything its owner set.
fn http_datable(modified: SystemTime) -> SystemTime {
    const LAST: Duration = Duration::from_secs(253_402_300_799); // 9999-12-31T23:59:59Z
    match modified.duration_since(SystemTime::UNIX_EPOCH) {
        Ok(since) => SystemTime::UNIX_EPOCH + since.min(LAST),
        Err(_) => SystemTime::UNIX_EPOCH,
    }
}

/// The fields every answer for a file carries (its validators, and that it takes ranges),
/// with room for `more`.
fn validators(etag: &HeaderValue, last_modified: &HeaderValue, more: usize) -> HeaderMap {
    let mut fields = HeaderMap::with_capacity(3 + more);
    // Each name goes in once into a new map, so by `append`, which has no values to replace.
    fields.append(header::ETAG, etag.clone());
    fields.append(header::LAST_MODIFIED, last_modified.clone());
    fields.append(header::ACCEPT_RANGES, HeaderValue::from_static("bytes"));
    fields
}

/// What a site answers a request for a file with.
// Made and taken apart once per request: boxing the built answers would cost each an allocation.
#[allow(clippy::large_enum_variant)]
pub enum FileAnswer {
    /// The whole file's 200, written from the fields made when the file was read.
    Whole(WholeFile),
    /// Any other answer (a range, a 304, a refusal).
    Built(Response<ProxyBody>),
}

impl FileAnswer {
    pub fn status(&self) -> StatusCode {
        match self {
            FileAnswer::Whole(whole) => whole.status(),
            FileAnswer::Built(response) => response.status(),
        }
    }

    /// The bytes of the file its body carries: none for a `HEAD`, a 304 or a refusal.
    fn body_bytes(&self) -> Option<u64> {
        match self {
            FileAnswer::Whole(whole) => (!whole.head).then_some(whole.file.len),
            FileAnswer::Built(response) => match response.body() {
                ProxyBody::File(region) => Some(region.len()),
                _ => None,
            },
        }
    }

    /// The answer as the pipeline (and a step that edits answers) takes it.
    pub fn into_response(self) -> Response<ProxyBody> {
        match self {
            FileAnswer::Whole(whole) => {
                let mut response = Response::new(whole.body());
                *response.headers_mut() = whole.file.whole.clone();
                response
            }
            FileAnswer::Built(response) => response,
        }
    }
}

/// A whole file's 200 (no body after `HEAD`).
pub struct WholeFile {
    file: Arc<File>,
    head: bool,
    /// Where its bytes are counted if they leave by sendfile(2), and for which worker.
    counted: Option<(Arc<dyn SendfileCount>, usize)>,
}

/// Where a site counts the bytes its answers send by sendfile(2), for one worker.
#[derive(Clone, Copy)]
struct Sendfile<'a> {
    counters: &'a Arc<PerWorker<SiteCounters>>,
    worker: usize,
}

impl Sendfile<'_> {
    /// The counter for a region whose bytes are `kept`: none for one small enough to go beside
    /// its head, which never goes by sendfile(2).
    fn for_region(self, kept: Option<&Bytes>) -> Option<(Arc<dyn SendfileCount>, usize)> {
        (!FileRegion::fits_beside_head(kept)).then(|| {
            let counters: Arc<dyn SendfileCount> = self.counters.clone();
            (counters, self.worker)
        })
    }
}

impl HeldAnswer for WholeFile {
    fn status(&self) -> StatusCode {
        StatusCode::OK
    }

    fn fields(&self) -> impl Iterator<Item = (&HeaderName, &[u8])> {
        self.file
            .whole
            .iter()
            .map(|(name, value)| (name, value.as_bytes()))
    }

    fn body(&self) -> ProxyBody {
        if self.head {
            return ProxyBody::Local(None);
        }
        let file = &self.file;
        let mut region = FileRegion::new(file.opened.clone(), 0, file.len, file.body.clone());
        if let Some((counted, worker)) = &self.counted {
            region.count_sendfile_with(counted.clone(), *worker);
        }
        ProxyBody::File(region)
    }
}

/// 200, 206, 304 or 416 for `file`, its bytes counted by `sendfile` when they go that way.
fn answer(file: &Arc<File>, request: &dyn Fields, head: bool, sendfile: Sendfile) -> FileAnswer {
    let mut response = Response::new(ProxyBody::Local(None));
    // Within a second of a change the date cannot tell versions apart: the ETag still does.
    if not_modified(request, Some(&file.etag), Some(file.modified)) {
        *response.status_mut() = StatusCode::NOT_MODIFIED;
        *response.headers_mut() = validators(&file.etag, &file.last_modified, 0);
        return FileAnswer::Built(response);
    }
    let modified = file.last_modified.to_str().unwrap_or("");
    let range = match request.get(&header::RANGE) {
        Some(range) if range_applies(request, Some(&file.etag), modified) => {
            byte_range(range, file.len)
        }
        _ => None,
    };
    let Some(range) = range else {
        return FileAnswer::Whole(WholeFile {
            file: file.clone(),
            head,
            counted: (!head)
                .then(|| sendfile.for_region(file.body.as_ref()))
                .flatten(),
        });
    };
    let headers = response.headers_mut();
    *headers = validators(&file.etag, &file.last_modified, 3);
    headers.append(header::CONTENT_TYPE, file.content_type.clone());
    let (status, content_range, (start, end)) = match range {
        Ok((start, end)) => (
            StatusCode::PARTIAL_CONTENT,
            format!("bytes {start}-{}/{}", end - 1, file.len),
            (start, end),
        ),
        Err(()) => (
            StatusCode::RANGE_NOT_SATISFIABLE,
            format!("bytes */{}", file.len),
            (0, 0),
        ),
    };
    headers.append(
        header::CONTENT_RANGE,
        HeaderValue::from_str(&content_range).expect("digits"),
    );
    headers.append(header::CONTENT_LENGTH, HeaderValue::from(end - start));
    *response.status_mut() = status;
    if status == StatusCode::RANGE_NOT_SATISFIABLE || head {
        return FileAnswer::Built(response);
    }
    let kept = file
        .body
        .as_ref()
        .map(|body| body.slice(start as usize..end as usize));
    let counted = sendfile.for_region(kept.as_ref());
    let mut region = FileRegion::new(file.opened.clone(), start, end, kept);
    if let Some((counter, worker)) = counted {
        region.count_sendfile_with(counter, worker);
    }
    *response.body_mut() = ProxyBody::File(region);
    FileAnswer::Built(response)
}

/// `bytes=a-b`, `bytes=a-` or `bytes=-n` against a file of `len` bytes, as a half-open range;
/// `None` for what is ignored (other units, several ranges: the whole file is sent), `Err` for
/// a range that misses the file (416).
fn byte_range(value: &[u8], len: u64) -> Option<Result<(u64, u64), ()>> {
    let spec = std::str::from_utf8(value)
        .ok()?
        .trim()
        .strip_prefix("bytes=")?;
    if spec.contains(',') {
        return None;
    }
    let (first, last) = spec.split_once('-')?;
    let (first, last) = (first.trim(), last.trim());
    let number = |text: &str| text.parse::<u64>().ok();
    let range = if first.is_empty() {
        let suffix = number(last)?;
        // Nothing in an empty file satisfies a range (and `end - 1` must stay above zero).
        if suffix == 0 || len == 0 {
            return Some(Err(()));
        }
        (len.saturating_sub(suffix), len)
    } else {
        let start = number(first)?;
        let end = if last.is_empty() {
            len
        } else {
            let last = number(last)?;
            if last < start {
                return None;
            }
            last.saturating_add(1).min(len)
        };
        if start >= len {
            return Some(Err(()));
        }
        (start, end)
    };
    Some(Ok(range))
}

fn plain(status: StatusCode, text: &'static str) -> Response<ProxyBody> {
    let mut response = Response::new(ProxyBody::local(text));
    *response.status_mut() = status;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    fn range(text: &str, len: u64) -> Option<Result<(u64, u64), ()>> {
        byte_range(text.as_bytes(), len)
    }

    #[test]
    fn byte_ranges() {
        assert_eq!(range("bytes=0-9", 100), Some(Ok((0, 10))));
        assert_eq!(range("bytes=90-", 100), Some(Ok((90, 100))));
        assert_eq!(range("bytes=-10", 100), Some(Ok((90, 100))));
        assert_eq!(range("bytes=50-500", 100), Some(Ok((50, 100))));
        assert_eq!(range("bytes=100-", 100), Some(Err(())));
        assert_eq!(range("bytes=-0", 100), Some(Err(())));
        assert_eq!(range("bytes=-1", 0), Some(Err(())));
        assert_eq!(range("bytes=0-1,5-6", 100), None);
        assert_eq!(range("items=0-1", 100), None);
        assert_eq!(range("bytes=9-1", 100), None);
    }

    #[test]
    fn request_paths_under_the_prefix() {
        let ok = |path, prefix| relative_path(path, prefix).ok().map(|r| r.to_path());
        assert_eq!(ok("/varlik/a.css", "/varlik"), Some(PathBuf::from("a.css")));
        assert_eq!(ok("/varlik/", "/varlik"), Some(PathBuf::new()));
        assert_eq!(
            ok("/varlik/alt%20dosya", "/varlik"),
            Some(PathBuf::from("alt dosya"))
        );
        assert!(matches!(
            relative_path("/varlik/a%00b", "/varlik"),
            Err(Refusal::BadPath)
        ));
        assert!(matches!(
            relative_path("/varlik/%2e%2e/x", "/varlik"),
            Err(Refusal::NotFound)
        ));
        for malformed in ["/varlik/%zz", "/varlik/a%+f", "/varlik/a%4"] {
            assert!(
                matches!(relative_path(malformed, "/varlik"), Err(Refusal::BadPath)),
                "{malformed}"
            );
        }
    }
}
