/*
 * The kubelet's plugin registration (pluginregistration.Registration, on
 * the socket in the kubelet's plugins_registry directory): GetInfo says
 * this is a DRA plugin, its driver's name, where its node service listens
 * and which versions of that service it serves; NotifyRegistrationStatus
 * hears the kubelet's verdict, and says a refusal on stderr.
 */
#include "services.h"

#include "pluginregistration_v1.pb-c.h"

#include <stdio.h>

#define REGISTRATION_SERVICE "/pluginregistration.Registration/"

/* The kubelet's name for a DRA plugin's type. */
#define PLUGIN_TYPE_DRA "DRAPlugin"

static void get_info(void *arg, const uint8_t *request, size_t request_length, struct unary_answer *answer)
{
    const struct registration_info *info = arg;
    Pluginregistration__InfoRequest *question = pluginregistration__info_request__unpack(NULL, request_length, request);
    if (question == NULL) {
        answer_undecodable(answer, REGISTRATION_SERVICE "GetInfo", &pluginregistration__info_request__descriptor);
        return;
    }
    pluginregistration__info_request__free_unpacked(question, NULL);

    char *versions[] = {DRA_SERVICE_V1, DRA_SERVICE_V1BETA1};
    Pluginregistration__PluginInfo reply = PLUGINREGISTRATION__PLUGIN_INFO__INIT;
    reply.type = PLUGIN_TYPE_DRA;
    reply.name = (char *)info->driver_name;
    reply.endpoint = (char *)info->plugin_socket;
    reply.n_supported_versions = sizeof versions / sizeof versions[0];
    reply.supported_versions = versions;
    answer_with_message(answer, &reply.base);
}

static void notify_registration_status(void *arg, const uint8_t *request, size_t request_length,
                                       struct unary_answer *answer)
{
    const struct registration_info *info = arg;
    Pluginregistration__RegistrationStatus *status =
        pluginregistration__registration_status__unpack(NULL, request_length, request);
    if (status == NULL) {
        answer_undecodable(answer, REGISTRATION_SERVICE "NotifyRegistrationStatus",
                           &pluginregistration__registration_status__descriptor);
        return;
    }
    if (status->plugin_registered) {
        fprintf(stderr, "gpuslice-dra: the kubelet registered driver %s (node service at %s)\n", info->driver_name,
                info->plugin_socket);
    } else {
        utf8_text_repair(status->error);
        fprintf(stderr, "gpuslice-dra: the kubelet refused to register driver %s: %s\n", info->driver_name,
                status->error[0] != '\0' ? status->error : "(no reason given)");
    }
    pluginregistration__registration_status__free_unpacked(status, NULL);

    Pluginregistration__RegistrationStatusResponse reply = PLUGINREGISTRATION__REGISTRATION_STATUS_RESPONSE__INIT;
    answer_with_message(answer, &reply.base);
}

int registration_add_methods(struct unary_server *server, int endpoint, const struct registration_info *info,
                             char *error, size_t error_size)
{
    void *arg = (void *)info;
    if (unary_server_add_method(server, endpoint, REGISTRATION_SERVICE "GetInfo", get_info, arg, error,
                                error_size) != 0)
        return -1;
    return unary_server_add_method(server, endpoint, REGISTRATION_SERVICE "NotifyRegistrationStatus",
                                   notify_registration_status, arg, error, error_size);
}
