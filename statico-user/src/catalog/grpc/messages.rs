//! The protobuf messages of the services statico answers, declared with `prost`'s derive (the
//! same field numbers and types as their `.proto` files: Fortio's `fgrpc/ping.proto`,
//! `grpc/health/v1/health.proto`, `grpc/reflection/v1/reflection.proto`, whose v1alpha is the same).

/// Fortio's `fgrpc.PingMessage`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct PingMessage {
    #[prost(int64, tag = "1")]
    pub seq: i64,
    /// The sender's time; in a reply, when the server received the call (Unix ns).
    #[prost(int64, tag = "2")]
    pub ts: i64,
    #[prost(string, tag = "3")]
    pub payload: String,
    /// How long the server waits before it replies.
    #[prost(int64, tag = "4")]
    pub delay_nanos: i64,
}

/// `grpc.health.v1.HealthCheckRequest`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct HealthCheckRequest {
    #[prost(string, tag = "1")]
    pub service: String,
}

/// `grpc.health.v1.HealthCheckResponse`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct HealthCheckResponse {
    #[prost(enumeration = "ServingStatus", tag = "1")]
    pub status: i32,
}

/// `grpc.health.v1.HealthCheckResponse.ServingStatus`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, prost::Enumeration)]
#[repr(i32)]
pub enum ServingStatus {
    Unknown = 0,
    Serving = 1,
    NotServing = 2,
    ServiceUnknown = 3,
}

/// `grpc.reflection.v1.ServerReflectionRequest`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ServerReflectionRequest {
    #[prost(string, tag = "1")]
    pub host: String,
    #[prost(oneof = "ReflectionAsk", tags = "3, 4, 5, 6, 7")]
    pub message_request: Option<ReflectionAsk>,
}

/// `ServerReflectionRequest.message_request`.
#[derive(Clone, PartialEq, prost::Oneof)]
pub enum ReflectionAsk {
    #[prost(string, tag = "3")]
    FileByFilename(String),
    #[prost(string, tag = "4")]
    FileContainingSymbol(String),
    #[prost(message, tag = "5")]
    FileContainingExtension(ExtensionRequest),
    #[prost(string, tag = "6")]
    AllExtensionNumbersOfType(String),
    #[prost(string, tag = "7")]
    ListServices(String),
}

/// `grpc.reflection.v1.ExtensionRequest`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ExtensionRequest {
    #[prost(string, tag = "1")]
    pub containing_type: String,
    #[prost(int32, tag = "2")]
    pub extension_number: i32,
}

/// `grpc.reflection.v1.ServerReflectionResponse`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ServerReflectionResponse {
    #[prost(string, tag = "1")]
    pub valid_host: String,
    #[prost(message, optional, tag = "2")]
    pub original_request: Option<ServerReflectionRequest>,
    #[prost(oneof = "ReflectionReply", tags = "4, 5, 6, 7")]
    pub message_response: Option<ReflectionReply>,
}

/// `ServerReflectionResponse.message_response`.
#[derive(Clone, PartialEq, prost::Oneof)]
pub enum ReflectionReply {
    #[prost(message, tag = "4")]
    FileDescriptorResponse(FileDescriptorResponse),
    #[prost(message, tag = "5")]
    AllExtensionNumbersResponse(ExtensionNumberResponse),
    #[prost(message, tag = "6")]
    ListServicesResponse(ListServiceResponse),
    #[prost(message, tag = "7")]
    ErrorResponse(ErrorResponse),
}

/// `grpc.reflection.v1.FileDescriptorResponse`: serialized `FileDescriptorProto`s.
#[derive(Clone, PartialEq, prost::Message)]
pub struct FileDescriptorResponse {
    #[prost(bytes = "vec", repeated, tag = "1")]
    pub file_descriptor_proto: Vec<Vec<u8>>,
}

/// `grpc.reflection.v1.ExtensionNumberResponse`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ExtensionNumberResponse {
    #[prost(string, tag = "1")]
    pub base_type_name: String,
    #[prost(int32, repeated, tag = "2")]
    pub extension_number: Vec<i32>,
}

/// `grpc.reflection.v1.ListServiceResponse`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ListServiceResponse {
    #[prost(message, repeated, tag = "1")]
    pub service: Vec<ServiceResponse>,
}

/// `grpc.reflection.v1.ServiceResponse`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ServiceResponse {
    #[prost(string, tag = "1")]
    pub name: String,
}

/// `grpc.reflection.v1.ErrorResponse`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ErrorResponse {
    #[prost(int32, tag = "1")]
    pub error_code: i32,
    #[prost(string, tag = "2")]
    pub error_message: String,
}
