from django.contrib import admin

from accounts.models import ApiToken


@admin.register(ApiToken)
class ApiTokenAdmin(admin.ModelAdmin):
    list_display = ["token_key", "name", "user", "created", "last_used_at", "expiry"]
    search_fields = ["name", "user__username", "token_key"]
    readonly_fields = ["digest", "token_key", "user", "created", "last_used_at"]
