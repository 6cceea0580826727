//! GET and LIST: one object, or a filtered, paged list of them.

use serde_json::{Value, json};

use super::{ApiServer, ListOptions};
use crate::error::ApiError;
use crate::event;
use crate::resource::ResourceType;

impl ApiServer {
    /// GET one object.
    pub fn get(&self, rt: &ResourceType, ns: Option<&str>, name: &str) -> Result<Value, ApiError> {
        let obj = self
            .store
            .get(&Self::key(rt), &Self::ns_key(rt, ns), name)
            .ok_or_else(|| ApiError::not_found(&rt.group, &rt.plural, name))?;
        Ok(Self::served(rt, &obj))
    }

    /// LIST: the list object with items, filtered and paged.
    pub fn list(
        &self,
        rt: &ResourceType,
        ns: Option<&str>,
        opts: &ListOptions,
    ) -> Result<Value, ApiError> {
        let ns = if rt.namespaced { ns } else { None };
        let (items, rv) = self.store.list(&Self::key(rt), ns);
        let mut out = Vec::new();
        let start_after = match &opts.continue_token {
            Some(t) => Some(decode_continue(t)?),
            None => None,
        };
        let mut more = false;
        for obj in items {
            let (ons, oname) = crate::store::names(&obj);
            if let Some((sns, sname)) = &start_after
                && (ons.as_str(), oname.as_str()) <= (sns.as_str(), sname.as_str())
            {
                continue;
            }
            // Field selectors name the fields of the version asked for.
            let served;
            let fields_of = if event::is_converted(rt) {
                served = Self::served(rt, &obj);
                &served
            } else {
                &*obj
            };
            // Hidden until initialized, unless asked for (the era's storage filter).
            if self.legacy_initializers
                && !opts.include_uninitialized
                && !super::initialization::is_initialized(&obj)
            {
                continue;
            }
            if !opts.labels.matches(obj.pointer("/metadata/labels"))
                || !opts.fields.matches(fields_of)
            {
                continue;
            }
            if opts.limit > 0 && out.len() == opts.limit {
                more = true;
                break;
            }
            out.push(Self::served(rt, &obj));
        }
        let mut metadata = json!({"resourceVersion": rv.to_string()});
        if more && let Some(last) = out.last() {
            let (lns, lname) = crate::store::names(last);
            metadata["continue"] = json!(encode_continue(&lns, &lname));
        }
        Ok(json!({
            "kind": format!("{}List", rt.kind),
            "apiVersion": rt.api_version(),
            "metadata": metadata,
            "items": out,
        }))
    }
}

fn encode_continue(ns: &str, name: &str) -> String {
    use base64::Engine;
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(json!([ns, name]).to_string())
}

fn decode_continue(token: &str) -> Result<(String, String), ApiError> {
    use base64::Engine;
    let bad = || {
        ApiError::bad_request(
            "continue key is not valid: incorrect encoded start resourceVersion (version meta.k8s.io/v1)",
        )
    };
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(token)
        .map_err(|_| bad())?;
    let v: Vec<String> = serde_json::from_slice(&bytes).map_err(|_| bad())?;
    match v.as_slice() {
        [ns, name] => Ok((ns.clone(), name.clone())),
        _ => Err(bad()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn continue_tokens_round_trip() {
        assert_eq!(
            decode_continue(&encode_continue("ns", "n")).unwrap(),
            ("ns".into(), "n".into())
        );
        assert_eq!(decode_continue("!!").unwrap_err().code, 400);
    }
}
