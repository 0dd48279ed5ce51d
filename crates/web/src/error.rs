//! The API's error answer, below both the handlers (`api`) and the limits that refuse work
//! (`limits`), which each make one: in either, it made the two modules use each other.

use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::json;

/// An API error: a status and a one-line reason, as `{"error": …}`.
#[derive(Debug)]
pub struct ApiError(pub(crate) StatusCode, pub(crate) String);

impl ApiError {
    /// Why, in one line.
    pub fn message(&self) -> &str {
        &self.1
    }

    /// An error answer with `status` and a one-line reason.
    pub fn new(status: StatusCode, msg: String) -> Self {
        ApiError(status, msg)
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        retry_after((self.0, Json(json!({ "error": self.1 }))).into_response())
    }
}

/// A 429 or 503 tells the client when to come back.
fn retry_after(mut r: Response) -> Response {
    if matches!(
        r.status(),
        StatusCode::TOO_MANY_REQUESTS | StatusCode::SERVICE_UNAVAILABLE
    ) {
        r.headers_mut()
            .insert(header::RETRY_AFTER, header::HeaderValue::from_static("1"));
    }
    r
}
