//! Where the lab's tables go besides the terminal: the rows of a run as pretty JSON, for
//! charts and for comparing runs.

use std::path::Path;

/// Writes `rows` as pretty JSON to `path`, if one was given, and says where.
pub fn write_rows<T: serde::Serialize + ?Sized>(
    path: Option<&Path>,
    rows: &T,
) -> Result<(), Box<dyn std::error::Error>> {
    if let Some(path) = path {
        std::fs::write(path, serde_json::to_string_pretty(rows)?)?;
        println!("\nJSON rows written to {}", path.display());
    }
    Ok(())
}
