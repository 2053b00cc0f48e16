//! The command line's client of a running host: `switchyard plugin
//! list|upload|remove|invoke` and `switchyard admin users` call the API
//! with an operator's key, and print plain tables for people or the API's
//! JSON for scripts.

use std::path::Path;

use anyhow::{Context, bail};
use serde_json::Value;

/// Where the host is and who calls it.
pub struct Api {
    base: String,
    key: String,
    http: reqwest::Client,
}

impl Api {
    /// A client of the host at `url` (e.g. `http://127.0.0.1:8080`) calling
    /// with `key`.
    pub fn new(url: &str, key: &str) -> Api {
        Api {
            base: url.trim_end_matches('/').to_string(),
            key: key.to_string(),
            http: reqwest::Client::new(),
        }
    }

    async fn send(&self, request: reqwest::RequestBuilder) -> anyhow::Result<Value> {
        let response = request
            .bearer_auth(&self.key)
            .send()
            .await
            .with_context(|| format!("cannot reach the host at {}; check --url", self.base))?;
        let status = response.status();
        let text = response.text().await?;
        let body: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
        if !status.is_success() {
            let message = body["error"]["message"].as_str().unwrap_or(&text);
            bail!("{message} (HTTP {})", status.as_u16());
        }
        Ok(body)
    }

    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    /// `GET /v1/admin/plugins`.
    pub async fn plugins(&self) -> anyhow::Result<Value> {
        self.send(self.http.get(self.url("/v1/admin/plugins")))
            .await
    }

    /// `PUT /v1/admin/plugins/{name}` with the component in `wasm`; `query`
    /// holds kind, version and limits.
    pub async fn upload(
        &self,
        name: &str,
        wasm: &Path,
        query: &[(&str, String)],
    ) -> anyhow::Result<Value> {
        let bytes = std::fs::read(wasm).with_context(|| format!("reading {}", wasm.display()))?;
        let request = self
            .http
            .put(self.url(&format!("/v1/admin/plugins/{name}")))
            .query(query)
            .header("content-type", "application/wasm")
            .body(bytes);
        self.send(request).await
    }

    /// `DELETE /v1/admin/plugins/{name}`.
    pub async fn remove(&self, name: &str) -> anyhow::Result<()> {
        let request = self
            .http
            .delete(self.url(&format!("/v1/admin/plugins/{name}")));
        self.send(request).await.map(|_| ())
    }

    /// `POST /v1/admin/plugins/{name}/invoke` with the JSON in `input`.
    pub async fn invoke(&self, name: &str, input: &Path) -> anyhow::Result<Value> {
        let text = std::fs::read_to_string(input)
            .with_context(|| format!("reading {}", input.display()))?;
        let body: Value = serde_json::from_str(&text)
            .with_context(|| format!("{} is not JSON", input.display()))?;
        let request = self
            .http
            .post(self.url(&format!("/v1/admin/plugins/{name}/invoke")))
            .json(&body);
        self.send(request).await
    }

    /// `GET /v1/admin/users`.
    pub async fn users(&self) -> anyhow::Result<Value> {
        self.send(self.http.get(self.url("/v1/admin/users"))).await
    }
}

/// `rows` under `headers`, each column as wide as its widest cell.
pub fn table(headers: &[&str], rows: &[Vec<String>]) -> String {
    let widths: Vec<usize> = headers
        .iter()
        .enumerate()
        .map(|(i, h)| {
            rows.iter()
                .map(|r| r[i].len())
                .chain([h.len()])
                .max()
                .unwrap_or(0)
        })
        .collect();
    let line = |cells: Vec<&str>| {
        let padded: Vec<String> = cells
            .iter()
            .zip(&widths)
            .map(|(c, w)| format!("{c:<w$}"))
            .collect();
        padded.join("  ").trim_end().to_string()
    };
    let mut out = vec![line(headers.to_vec())];
    out.extend(
        rows.iter()
            .map(|r| line(r.iter().map(String::as_str).collect())),
    );
    out.join("\n")
}

/// The listing's `data` as rows of `fields` (missing ones as `-`).
pub fn rows(listing: &Value, fields: &[&str]) -> Vec<Vec<String>> {
    listing["data"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default()
        .iter()
        .map(|item| {
            fields
                .iter()
                .map(|f| match &item[*f] {
                    Value::String(s) => s.clone(),
                    Value::Null => "-".into(),
                    other => other.to_string(),
                })
                .collect()
        })
        .collect()
}

#[cfg(test)]
mod tests {
    #[test]
    fn tables_align_their_columns() {
        let rows = vec![
            vec!["template-default".into(), "12".into()],
            vec!["x".into(), "3".into()],
        ];
        assert_eq!(
            super::table(&["NAME", "CALLS"], &rows),
            "NAME              CALLS\ntemplate-default  12\nx                 3"
        );
    }
}
