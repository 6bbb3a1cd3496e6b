//! Locations this project writes into manifests.
//!
//! Lance records a branch's parent root and a grafted base as the path it was given. A path
//! relative to the working directory would make the table unreadable from anywhere else, so every
//! layer that creates branches or grafts bases first makes a local path absolute.

/// The directory a local `uri` names (no scheme, or `file://`); `None` for object stores.
pub fn local_path(uri: &str) -> Option<std::path::PathBuf> {
    match uri.split_once("://") {
        None => Some(std::path::PathBuf::from(uri)),
        Some(("file", rest)) => Some(std::path::PathBuf::from(rest)),
        Some(_) => None,
    }
}

/// A local path made absolute (and canonical when it exists); a URI with a scheme as it is.
pub fn absolute_uri(uri: &str) -> String {
    if uri.contains("://") {
        return uri.to_string();
    }
    let path = std::path::Path::new(uri);
    let absolute = std::fs::canonicalize(path).or_else(|_| std::path::absolute(path));
    match absolute.ok().and_then(|p| p.to_str().map(String::from)) {
        Some(p) => p,
        None => uri.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::absolute_uri;

    #[test]
    fn relative_paths_become_absolute_and_urls_stay() {
        let made = absolute_uri("some/relative/table.lance");
        assert!(std::path::Path::new(&made).is_absolute(), "{made}");
        assert!(made.ends_with("some/relative/table.lance"), "{made}");
        assert_eq!(absolute_uri("s3://bucket/t.lance"), "s3://bucket/t.lance");
        assert_eq!(absolute_uri("/already/absolute"), "/already/absolute");
    }
}
