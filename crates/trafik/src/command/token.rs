//! `trafik token`: a signed token to try a JWT-protected route with, so the example needs no
//! signer of its own.

use std::process::ExitCode;
use std::time::{SystemTime, UNIX_EPOCH};

use trafik_policy::jwt::{self, DemoClaims};

use crate::cli::TokenArgs;

pub fn run(args: TokenArgs) -> Result<ExitCode, String> {
    let algorithm = jwt::algorithm(&args.algorithm)?;
    let key = match (&args.secret, &args.key_file) {
        (Some(secret), _) => secret.clone().into_bytes(),
        (None, Some(path)) => std::fs::read(path)
            .map_err(|e| format!("cannot read key file {}: {e}", path.display()))?,
        (None, None) => return Err("give --secret or --key-file".into()),
    };
    let issued_at = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_err(|e| format!("the clock is before 1970: {e}"))?
        .as_secs();
    let claims = DemoClaims {
        subject: args.sub,
        issuer: args.issuer,
        audience: args.audience,
        issued_at,
        lifetime: args.valid_for.as_secs(),
    };
    println!("{}", jwt::sign(algorithm, &key, &claims)?);
    Ok(ExitCode::SUCCESS)
}
