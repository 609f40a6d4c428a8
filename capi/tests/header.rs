//! The checked-in header is the one cbindgen generates from this crate: regenerates it and
//! fails if it differs. `HERDLESS_BLESS=1 cargo test -p herdless-c --test header` writes the
//! regenerated header instead.

use std::path::PathBuf;

#[test]
fn the_checked_in_header_is_what_cbindgen_generates() {
    let crate_dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let config = cbindgen::Config::from_file(crate_dir.join("cbindgen.toml"))
        .expect("capi/cbindgen.toml is readable");
    let bindings = cbindgen::Builder::new()
        .with_crate(&crate_dir)
        .with_config(config)
        .generate()
        .expect("cbindgen generates the header");
    let mut generated = Vec::new();
    bindings.write(&mut generated);
    let generated = String::from_utf8(generated).expect("the header is UTF-8");
    let path = crate_dir.join("../include/herdless.h");
    if std::env::var_os("HERDLESS_BLESS").is_some() {
        std::fs::write(&path, &generated).expect("include/herdless.h is writable");
        return;
    }
    let checked_in = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        checked_in == generated,
        "include/herdless.h differs from what cbindgen generates from capi/src; run \
         `HERDLESS_BLESS=1 cargo test -p herdless-c --test header` and commit the result"
    );
}
