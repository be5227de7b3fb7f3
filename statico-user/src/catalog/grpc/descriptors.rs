//! The `.proto` files of the services statico answers, as the `FileDescriptorProto`s server
//! reflection hands out (built here with `prost-types`, as `protoc` would have compiled them), so
//! that a client such as grpcurl needs no `.proto` of its own.

use prost_types::field_descriptor_proto::{Label, Type};
use prost_types::{
    DescriptorProto, EnumDescriptorProto, EnumValueDescriptorProto, FieldDescriptorProto,
    FileDescriptorProto, MethodDescriptorProto, OneofDescriptorProto, ServiceDescriptorProto,
};

/// Every file statico describes: Fortio's ping, health, the interop `TestService`, and reflection
/// (v1 and v1alpha).
pub fn files() -> Vec<FileDescriptorProto> {
    vec![
        ping(),
        health(),
        testing(),
        reflection("grpc/reflection/v1/reflection.proto", "grpc.reflection.v1"),
        reflection(
            "grpc/reflection/v1alpha/reflection.proto",
            "grpc.reflection.v1alpha",
        ),
    ]
}

/// Fortio's `ping.proto`.
fn ping() -> FileDescriptorProto {
    let msg = ".fgrpc.PingMessage";
    file(
        "ping.proto",
        "fgrpc",
        vec![message(
            "PingMessage",
            vec![
                field("seq", 1, Type::Int64, None),
                field("ts", 2, Type::Int64, None),
                field("payload", 3, Type::String, None),
                field("delayNanos", 4, Type::Int64, None),
            ],
        )],
        vec![],
        service("PingServer", vec![method("Ping", msg, msg, false, false)]),
    )
}

/// `grpc/health/v1/health.proto`.
fn health() -> FileDescriptorProto {
    let status = ".grpc.health.v1.HealthCheckResponse.ServingStatus";
    let mut response = message(
        "HealthCheckResponse",
        vec![field("status", 1, Type::Enum, Some(status))],
    );
    response.enum_type.push(EnumDescriptorProto {
        name: Some("ServingStatus".into()),
        value: ["UNKNOWN", "SERVING", "NOT_SERVING", "SERVICE_UNKNOWN"]
            .iter()
            .zip(0..)
            .map(|(name, number)| EnumValueDescriptorProto {
                name: Some((*name).into()),
                number: Some(number),
                options: None,
            })
            .collect(),
        ..EnumDescriptorProto::default()
    });
    let (ask, reply) = (
        ".grpc.health.v1.HealthCheckRequest",
        ".grpc.health.v1.HealthCheckResponse",
    );
    file(
        "grpc/health/v1/health.proto",
        "grpc.health.v1",
        vec![
            message(
                "HealthCheckRequest",
                vec![field("service", 1, Type::String, None)],
            ),
            response,
        ],
        vec![],
        service(
            "Health",
            vec![
                method("Check", ask, reply, false, false),
                method("Watch", ask, reply, false, true),
            ],
        ),
    )
}

/// grpc-go's interop `TestService` with the messages of `messages.proto` and `empty.proto` it uses,
/// in one file (the fields statico reads and writes).
fn testing() -> FileDescriptorProto {
    let t = |short: &str| format!(".grpc.testing.{short}");
    let payload = || field("payload", 3, Type::Message, Some(&t("Payload")));
    let status = || field("response_status", 7, Type::Message, Some(&t("EchoStatus")));
    let messages = vec![
        message("Empty", vec![]),
        message(
            "Payload",
            vec![
                field("type", 1, Type::Enum, Some(&t("PayloadType"))),
                field("body", 2, Type::Bytes, None),
            ],
        ),
        message(
            "EchoStatus",
            vec![
                field("code", 1, Type::Int32, None),
                field("message", 2, Type::String, None),
            ],
        ),
        message(
            "SimpleRequest",
            vec![
                field("response_type", 1, Type::Enum, Some(&t("PayloadType"))),
                field("response_size", 2, Type::Int32, None),
                payload(),
                status(),
            ],
        ),
        message(
            "SimpleResponse",
            vec![field("payload", 1, Type::Message, Some(&t("Payload")))],
        ),
        message(
            "StreamingInputCallRequest",
            vec![field("payload", 1, Type::Message, Some(&t("Payload")))],
        ),
        message(
            "StreamingInputCallResponse",
            vec![field("aggregated_payload_size", 1, Type::Int32, None)],
        ),
        message(
            "ResponseParameters",
            vec![
                field("size", 1, Type::Int32, None),
                field("interval_us", 2, Type::Int32, None),
            ],
        ),
        message(
            "StreamingOutputCallRequest",
            vec![
                field("response_type", 1, Type::Enum, Some(&t("PayloadType"))),
                repeated(field(
                    "response_parameters",
                    2,
                    Type::Message,
                    Some(&t("ResponseParameters")),
                )),
                payload(),
                status(),
            ],
        ),
        message(
            "StreamingOutputCallResponse",
            vec![field("payload", 1, Type::Message, Some(&t("Payload")))],
        ),
    ];
    let payload_type = EnumDescriptorProto {
        name: Some("PayloadType".into()),
        value: vec![EnumValueDescriptorProto {
            name: Some("COMPRESSABLE".into()),
            number: Some(0),
            options: None,
        }],
        ..EnumDescriptorProto::default()
    };
    let (empty, simple_in, simple_out) = (t("Empty"), t("SimpleRequest"), t("SimpleResponse"));
    let (input_in, input_out) = (
        t("StreamingInputCallRequest"),
        t("StreamingInputCallResponse"),
    );
    let (output_in, output_out) = (
        t("StreamingOutputCallRequest"),
        t("StreamingOutputCallResponse"),
    );
    file(
        "grpc/testing/test.proto",
        "grpc.testing",
        messages,
        vec![payload_type],
        service(
            "TestService",
            vec![
                method("EmptyCall", &empty, &empty, false, false),
                method("UnaryCall", &simple_in, &simple_out, false, false),
                method("StreamingOutputCall", &output_in, &output_out, false, true),
                method("StreamingInputCall", &input_in, &input_out, true, false),
                method("FullDuplexCall", &output_in, &output_out, true, true),
                method("HalfDuplexCall", &output_in, &output_out, true, true),
                method("UnimplementedCall", &empty, &empty, false, false),
            ],
        ),
    )
}

/// `reflection.proto` in `package` (v1 and v1alpha declare the same messages).
fn reflection(name: &str, package: &str) -> FileDescriptorProto {
    let t = |short: &str| format!(".{package}.{short}");
    let (ask, reply) = (t("ServerReflectionRequest"), t("ServerReflectionResponse"));
    let mut request = message(
        "ServerReflectionRequest",
        vec![
            field("host", 1, Type::String, None),
            in_oneof(field("file_by_filename", 3, Type::String, None)),
            in_oneof(field("file_containing_symbol", 4, Type::String, None)),
            in_oneof(field(
                "file_containing_extension",
                5,
                Type::Message,
                Some(&t("ExtensionRequest")),
            )),
            in_oneof(field(
                "all_extension_numbers_of_type",
                6,
                Type::String,
                None,
            )),
            in_oneof(field("list_services", 7, Type::String, None)),
        ],
    );
    request.oneof_decl.push(oneof("message_request"));
    let mut response = message(
        "ServerReflectionResponse",
        vec![
            field("valid_host", 1, Type::String, None),
            field("original_request", 2, Type::Message, Some(&ask)),
            in_oneof(field(
                "file_descriptor_response",
                4,
                Type::Message,
                Some(&t("FileDescriptorResponse")),
            )),
            in_oneof(field(
                "all_extension_numbers_response",
                5,
                Type::Message,
                Some(&t("ExtensionNumberResponse")),
            )),
            in_oneof(field(
                "list_services_response",
                6,
                Type::Message,
                Some(&t("ListServiceResponse")),
            )),
            in_oneof(field(
                "error_response",
                7,
                Type::Message,
                Some(&t("ErrorResponse")),
            )),
        ],
    );
    response.oneof_decl.push(oneof("message_response"));
    let messages = vec![
        request,
        message(
            "ExtensionRequest",
            vec![
                field("containing_type", 1, Type::String, None),
                field("extension_number", 2, Type::Int32, None),
            ],
        ),
        response,
        message(
            "FileDescriptorResponse",
            vec![repeated(field(
                "file_descriptor_proto",
                1,
                Type::Bytes,
                None,
            ))],
        ),
        message(
            "ExtensionNumberResponse",
            vec![
                field("base_type_name", 1, Type::String, None),
                repeated(field("extension_number", 2, Type::Int32, None)),
            ],
        ),
        message(
            "ListServiceResponse",
            vec![repeated(field(
                "service",
                1,
                Type::Message,
                Some(&t("ServiceResponse")),
            ))],
        ),
        message(
            "ServiceResponse",
            vec![field("name", 1, Type::String, None)],
        ),
        message(
            "ErrorResponse",
            vec![
                field("error_code", 1, Type::Int32, None),
                field("error_message", 2, Type::String, None),
            ],
        ),
    ];
    file(
        name,
        package,
        messages,
        vec![],
        service(
            "ServerReflection",
            vec![method("ServerReflectionInfo", &ask, &reply, true, true)],
        ),
    )
}

fn file(
    name: &str,
    package: &str,
    message_type: Vec<DescriptorProto>,
    enum_type: Vec<EnumDescriptorProto>,
    service: ServiceDescriptorProto,
) -> FileDescriptorProto {
    FileDescriptorProto {
        name: Some(name.into()),
        package: Some(package.into()),
        message_type,
        enum_type,
        service: vec![service],
        syntax: Some("proto3".into()),
        ..FileDescriptorProto::default()
    }
}

fn message(name: &str, field: Vec<FieldDescriptorProto>) -> DescriptorProto {
    DescriptorProto {
        name: Some(name.into()),
        field,
        ..DescriptorProto::default()
    }
}

/// A singular field (proto3: no presence), its JSON name in lower camel case as `protoc` gives it.
fn field(name: &str, number: i32, ty: Type, type_name: Option<&str>) -> FieldDescriptorProto {
    FieldDescriptorProto {
        name: Some(name.into()),
        number: Some(number),
        label: Some(Label::Optional as i32),
        r#type: Some(ty as i32),
        type_name: type_name.map(Into::into),
        json_name: Some(json_name(name)),
        ..FieldDescriptorProto::default()
    }
}

fn repeated(field: FieldDescriptorProto) -> FieldDescriptorProto {
    FieldDescriptorProto {
        label: Some(Label::Repeated as i32),
        ..field
    }
}

/// A member of its message's one oneof.
fn in_oneof(field: FieldDescriptorProto) -> FieldDescriptorProto {
    FieldDescriptorProto {
        oneof_index: Some(0),
        ..field
    }
}

fn oneof(name: &str) -> OneofDescriptorProto {
    OneofDescriptorProto {
        name: Some(name.into()),
        options: None,
    }
}

fn service(name: &str, method: Vec<MethodDescriptorProto>) -> ServiceDescriptorProto {
    ServiceDescriptorProto {
        name: Some(name.into()),
        method,
        ..ServiceDescriptorProto::default()
    }
}

fn method(
    name: &str,
    input: &str,
    output: &str,
    client_streaming: bool,
    server_streaming: bool,
) -> MethodDescriptorProto {
    MethodDescriptorProto {
        name: Some(name.into()),
        input_type: Some(input.into()),
        output_type: Some(output.into()),
        client_streaming: Some(client_streaming),
        server_streaming: Some(server_streaming),
        ..MethodDescriptorProto::default()
    }
}

/// `file_by_filename` → `fileByFilename`.
fn json_name(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    let mut upper = false;
    for c in name.chars() {
        match c {
            '_' => upper = true,
            c if upper => {
                out.push(c.to_ascii_uppercase());
                upper = false;
            }
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_names_are_lower_camel_case() {
        assert_eq!(json_name("file_by_filename"), "fileByFilename");
        assert_eq!(json_name("delayNanos"), "delayNanos");
    }
}
