//! Every error the server answers: a status and a JSON body with a message, in a shape the
//! Cohere, OpenAI and TEI clients all read (`message`, and `error.message` / `error.type`). A
//! refusal also names itself: a question with personal data is a 400 whose `error.reason` is
//! `pii_refused` and `error.kinds` the kinds found (its message is the config's `pii.message`).

use axum::extract::rejection::JsonRejection;
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;

/// An error response.
#[derive(Debug, Clone)]
pub struct ApiError {
    pub status: StatusCode,
    pub message: String,
    /// What a refusal is, for clients that act on it (`pii_refused`), with its details (the
    /// personal-data kinds); `None` for other errors.
    pub reason: Option<(&'static str, serde_json::Value)>,
}

impl ApiError {
    pub fn new(status: StatusCode, message: impl Into<String>) -> Self {
        ApiError {
            status,
            message: message.into(),
            reason: None,
        }
    }

    /// 422: well-formed, but not something the server can do.
    pub fn unprocessable(message: impl Into<String>) -> Self {
        Self::new(StatusCode::UNPROCESSABLE_ENTITY, message)
    }

    /// 413: over a size limit.
    pub fn too_large(message: impl Into<String>) -> Self {
        Self::new(StatusCode::PAYLOAD_TOO_LARGE, message)
    }

    /// 429: the queue is full (sent with `Retry-After`).
    pub fn overloaded(message: impl Into<String>) -> Self {
        Self::new(StatusCode::TOO_MANY_REQUESTS, message)
    }

    /// 503: not ready (models loading) or stopped.
    pub fn unavailable(message: impl Into<String>) -> Self {
        Self::new(StatusCode::SERVICE_UNAVAILABLE, message)
    }

    /// 504: the request's deadline passed.
    pub fn timeout(message: impl Into<String>) -> Self {
        Self::new(StatusCode::GATEWAY_TIMEOUT, message)
    }

    /// 500: the model or the pipeline failed.
    /// 501: the config has no model for the route.
    pub fn not_implemented(message: impl Into<String>) -> Self {
        Self::new(StatusCode::NOT_IMPLEMENTED, message)
    }

    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(StatusCode::INTERNAL_SERVER_ERROR, message)
    }

    fn kind(&self) -> &'static str {
        match self.status.as_u16() {
            400 | 413 | 415 | 422 => "invalid_request_error",
            401 => "authentication_error",
            404 | 405 => "not_found_error",
            429 => "rate_limit_error",
            503 | 504 => "overloaded",
            _ => "server_error",
        }
    }
}

impl From<JsonRejection> for ApiError {
    /// Malformed JSON is a 400, JSON of the wrong shape a 422, a body over the limit a 413, a
    /// missing `Content-Type: application/json` a 415: the status axum gives each.
    fn from(rejection: JsonRejection) -> Self {
        ApiError::new(rejection.status(), rejection.body_text())
    }
}

impl From<rerank::Error> for ApiError {
    fn from(e: rerank::Error) -> Self {
        match &e {
            // What the request asked for is wrong (an unknown recall mode, a top_k of 0, a
            // malformed two-phase query): the client's mistake, and the message names it.
            rerank::Error::Config(_)
            | rerank::Error::InvalidInput(_)
            | rerank::Error::QueryFormat(_) => ApiError::unprocessable(e.to_string()),
            // Personal data in the question: a 400 that names the refusal and the kinds found
            // (never the values).
            rerank::Error::PiiRefused { kinds, .. } => ApiError {
                reason: Some(("pii_refused", serde_json::json!({ "kinds": kinds }))),
                ..ApiError::new(StatusCode::BAD_REQUEST, e.to_string())
            },
            _ => ApiError::internal(e.to_string()),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut body = serde_json::json!({
            "message": self.message,
            "error": { "message": self.message, "type": self.kind(), "code": self.status.as_u16() },
        });
        if let Some((reason, serde_json::Value::Object(details))) = &self.reason {
            let error = &mut body["error"];
            error["reason"] = serde_json::Value::from(*reason);
            for (key, value) in details {
                error[key] = value.clone();
            }
        }
        let mut response = (self.status, Json(body)).into_response();
        if self.status == StatusCode::TOO_MANY_REQUESTS
            || self.status == StatusCode::SERVICE_UNAVAILABLE
        {
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
        }
        response
    }
}
